package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAPITokenGuardsGovernorAPIOnly(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), APIToken: "s3cret"}))
	c := client(t)

	resp, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 401, resp.StatusCode)

	req, _ := http.NewRequest("GET", base+"/governor/lanes", nil)
	req.Header.Set(HeaderToken, "wrong")
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 401, resp.StatusCode)

	req.Header.Set(HeaderToken, "s3cret")
	resp, err = c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	// Forwarded calls need no token, and a token sent along stays here.
	got := make(chan http.Header, 1)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) { got <- r.Header.Clone() }
	resp, _ = chat(t, c, base, map[string]string{"Authorization": "Bearer sk-x", HeaderToken: "s3cret"})
	assert.Equal(t, 200, resp.StatusCode)
	h := <-got
	assert.Equal(t, "Bearer sk-x", h.Get("Authorization"))
	assert.Empty(t, h.Get(HeaderToken))
}

// rawExchange sends raw bytes to addr and returns what comes back until
// the server closes or a second passes without data.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(bufio.NewReader(conn))
	return string(b)
}

func TestHostileRequestLines(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, up+"/anthropic-base")}}}))
	addr := strings.TrimPrefix(base, "http://")

	// An absolute URL in the request line cannot send the call elsewhere.
	out := rawExchange(t, addr, "GET http://evil.example/steal HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
	assert.Contains(t, out, "HTTP/1.1 200")
	// Traversal out of a route prefix lands on the default upstream's path,
	// never above the route's base path.
	out = rawExchange(t, addr, "GET /anthropic/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.Contains(t, out, "HTTP/1.1 200")
	rec.mu.Lock()
	paths := append([]string(nil), rec.ids...)
	rec.mu.Unlock()
	assert.Len(t, paths, 2)

	// Headers beyond the read buffer are refused, not forwarded.
	out = rawExchange(t, addr, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\nConnection: close\r\n\r\n")
	assert.NotContains(t, out, "HTTP/1.1 200")
	rec.mu.Lock()
	assert.Len(t, rec.ids, 2, "the oversized request never reached the upstream")
	rec.mu.Unlock()
}

func TestHeaderInjectionIsNotForwarded(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	got := make(chan http.Header, 4)
	rec, up := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) { got <- r.Header.Clone() }
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	addr := strings.TrimPrefix(base, "http://")
	for _, raw := range []string{
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\rInjected: yes\r\nConnection: close\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\nInjected: yes\r\nConnection: close\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a%0d%0aInjected: yes\r\nConnection: close\r\n\r\n",
	} {
		rawExchange(t, addr, raw)
	}
	close(got)
	for h := range got {
		for name, vs := range h {
			for _, v := range vs {
				assert.NotContains(t, v, "\r", name)
				assert.NotContains(t, v, "\n", name)
			}
		}
		if inj := h.Get("Injected"); inj != "" {
			// A bare LF ends a header line in lenient HTTP/1.1 parsers; what
			// matters is that it arrives as its own well-formed header, not
			// smuggled inside another one's value.
			assert.Empty(t, h.Get("X-A")[strings.Index(h.Get("X-A"), "a")+1:])
		}
	}
}

func TestRecordedPathsAfterTraversal(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	got := make(chan string, 4)
	rec, up := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) { got <- r.URL.Path }
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, up+"/anthropic-base")}}}))
	addr := strings.TrimPrefix(base, "http://")
	rawExchange(t, addr, "GET /anthropic/../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	rawExchange(t, addr, "GET /anthropic/v1/../../x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.Equal(t, "/etc/passwd", <-got, "normalized before routing: the default upstream, at its root")
	assert.Equal(t, "/x", <-got)
}

func TestPipelinedRequestsAllAnswered(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	addr := strings.TrimPrefix(base, "http://")
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	out := rawExchange(t, addr, req+req+strings.Replace(req, "Host: x", "Host: x\r\nConnection: close", 1))
	assert.Equal(t, 3, strings.Count(out, "HTTP/1.1 200"), out)
}

// A client that never reads its stream is given up after the idle timeout,
// and the upstream stream is closed.
func TestClientThatNeverReadsIsGivenUp(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	gone := make(chan struct{}, 1)
	chunk := strings.Repeat("data: "+strings.Repeat("x", 1000)+"\n\n", 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				gone <- struct{}{}
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: 300 * time.Millisecond}))

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	// ... and never read.
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream stream of a client that never reads was never closed")
	}
}
