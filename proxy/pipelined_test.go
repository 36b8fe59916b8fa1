package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request head with a line that ends in a bare LF, pipelined behind
// another request in the same read, gets 400 at once as the first head of
// a read does, and the request before it is served. (fasthttp had the
// pipelined head before Governor saw its first byte: it was not scanned,
// and the client waited for the read timeout, or, with a CR LF CR LF in
// its body, had the call forwarded.)
func TestPipelinedHeadWithBareLFIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr), ReadTimeout: time.Hour}))
	addr := strings.TrimPrefix(base, "http://")
	// exchange writes raw in one write and reads the answers.
	exchange := func(raw string, answers int) []int {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, raw)
		require.NoError(t, err)
		// Far short of the read timeout: a head that waits for it
		// gets nothing.
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
		r := bufio.NewReader(conn)
		var codes []int
		for range answers {
			resp, err := http.ReadResponse(r, nil)
			if !assert.NoError(t, err, "%q: answer %d", raw, len(codes)+1) {
				break
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 400 {
				assert.Contains(t, string(b), "must end in CR LF", raw)
			}
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}
	const good = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		raw      string
		codes    []int
		upstream int // requests that reach the provider
	}{
		{good + "GET /v1/models HTTP/1.1\nHost: x\n\n", []int{200, 400}, 1},
		{good + good + "GET /v1/models HTTP/1.1\r\nHost: x\n\r\n", []int{200, 200, 400}, 2},
		// Behind a body, whose own bare LFs are no head's.
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\na\n\nb\nc\n" + "GET /v1/models HTTP/1.1\nHost: x\n\n", []int{200, 400}, 1},
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\ncontent-length:  7 \r\n\r\na\n\nb\nc\n" + "GET /v1/models HTTP/1.1\nHost: x\n\n", []int{200, 400}, 1},
		// A CR LF CR LF in its body let fasthttp parse the head: it is
		// the pipelined call that is refused, not the one before it.
		{good + "POST /v1/x HTTP/1.1\nHost: x\nContent-Length: 8\n\nab\r\n\r\ncd", []int{200, 400}, 1},
		// Behind a chunked body, its chunks' bare LFs and its trailer.
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\na\nb\r\n2;ext=1\r\n\n\n\r\n0\r\n\r\n" + "GET /v1/models HTTP/1.1\nHost: x\n\n", []int{200, 400}, 1},
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\ntransfer-encoding:  Chunked \r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n" + "GET /v1/models HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", []int{200, 400}, 1},
		// Heads of CR LF lines behind a body with bare LFs are served.
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\na\n\nb" + good + "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []int{200, 200, 200}, 3},
		{"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na\n\nb\r\n0\r\n\r\n" + good + "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []int{200, 200, 200}, 3},
	} {
		assert.Equal(t, tc.codes, exchange(tc.raw, len(tc.codes)), "%q", tc.raw)
		for range tc.upstream {
			select {
			case <-lines:
			case <-time.After(10 * time.Second):
				t.Fatalf("%q: a call never reached the provider", tc.raw)
			}
		}
		assert.Empty(t, lines, "%q: nothing else reached the provider", tc.raw)
	}
}
