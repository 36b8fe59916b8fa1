package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScratchShapes(t *testing.T) {
	seen := make(chan string, 100)
	up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	})
	_ = up
	// a dumping upstream with net/http
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := httputil.DumpRequest(r, true)
		seen <- string(b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+ln.Addr().String()), MaxBodyBytes: 4096, ReadTimeout: 2 * time.Second}))
	addr := strings.TrimPrefix(base, "http://")
	cases := []struct{ name, raw string }{}
	for _, name := range []string{"X Foo", "X\tFoo", "X-Foo\x7f", "(X)", "X-\xc3\x84", "Transfer-Encoding x", "Content-Length x", "X/Y", "X@Y", "Transfer_Encoding", "X,Y", "\"X\"", "X;Y", "X=Y"} {
		cases = append(cases, struct{ name, raw string }{name, "POST /v1/x HTTP/1.1\r\nHost: x\r\n" + name + ": chunked\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"})
	}
	cases = append(cases, struct{ name, raw string }{"bare LF", "POST /v1/x HTTP/1.1\nHost: x\nContent-Length: 2\nConnection: close\n\n{}"})
	for _, tc := range cases {
		out := rawExchange(t, addr, tc.raw)
		first := out
		if i := strings.Index(out, "\r\n\r\n"); i >= 0 {
			first = out[:min(len(out), i+80)]
		}
		var ups []string
	drain:
		for {
			select {
			case s := <-seen:
				ups = append(ups, s)
			case <-time.After(100 * time.Millisecond):
				break drain
			}
		}
		fmt.Printf("##### %s\n--> client (%d answers): %q\n", tc.name, strings.Count(out, "HTTP/1."), first)
		for _, u := range ups {
			fmt.Printf("--> upstream: %q\n", u)
		}
	}
}
