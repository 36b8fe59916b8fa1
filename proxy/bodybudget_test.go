package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startCall writes a call with a body of n bytes on a connection of its
// own and returns the connection, its answer not read.
func startCall(t *testing.T, addr, id string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	body := `{"model":"m","x":"` + strings.Repeat("a", n-len(`{"model":"m","x":""}`)) + `"}`
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", id, len(body), body)
	require.NoError(t, err)
	return c
}

func readResponse(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// MaxBufferedBytes bounds the request bodies held by calls waiting or in
// flight: a call whose body would not fit gets 503 buffers_full with
// Retry-After — before its body is read when Content-Length announces it —
// and nothing reaches the provider; once the calls holding bodies end,
// calls are taken again.
func TestRequestBodiesHeldAreBounded(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := newSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 1000, Metrics: set}))
	held := func() string {
		var sb strings.Builder
		set.WritePrometheus(&sb)
		for line := range strings.SplitSeq(sb.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "governor_buffered_request_bytes "); ok {
				return v
			}
		}
		return ""
	}
	addr := strings.TrimPrefix(base, "http://")

	blocked := startCall(t, addr, "block", 600) // in flight, held by the provider
	defer blocked.Close()
	require.Equal(t, "block", <-rec.arrived)
	assert.Equal(t, "600", held())

	// Announced by Content-Length: refused on its head, the body never sent.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: announced\r\nContent-Length: 600\r\n\r\n")
	require.NoError(t, err)
	resp, body := readResponse(t, c)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	code, msg := governorError(t, body)
	assert.Equal(t, CodeBuffersFull, code)
	assert.Contains(t, msg, "would go beyond 1000 bytes", "the message names the limit, not the bytes held")

	// Chunked: read, then refused.
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c2.Close()
	chunk := `{"model":"m","x":"` + strings.Repeat("b", 580) + `"}`
	_, err = fmt.Fprintf(c2, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: chunked\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk)
	require.NoError(t, err)
	resp, body = readResponse(t, c2)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	// A small one still fits.
	small := startCall(t, addr, "small", 300)
	resp, body = readResponse(t, small)
	small.Close()
	assert.Equal(t, 200, resp.StatusCode, body)

	close(rec.release)
	resp, body = readResponse(t, blocked)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, []string{"block", "small"}, rec.seen(), "the refused calls never reached the provider")

	// The budget is back: the same large call is taken now.
	again := startCall(t, addr, "again", 600)
	defer again.Close()
	resp, body = readResponse(t, again)
	assert.Equal(t, 200, resp.StatusCode, body)
	require.Eventually(t, func() bool { return held() == "0" }, 5*time.Second, time.Millisecond, "every body given back")
}
