package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/logtest"
	"github.com/llmgovernor/governor/mockllm"
)

// A method no LLM API uses is refused at the door, in the error shape of
// the provider the path routes to, never forwarded: a TRACE forwarded to a
// provider that echoes it would hand the request's credentials to a page's
// script (cross-site tracing).
func TestMethodsNoLLMAPIUsesAreRefused(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, "http://"+upAddr+"/anthropic-base")}}}))
	addr := strings.TrimPrefix(base, "http://")
	for _, tc := range []struct{ raw, shape string }{
		{"TRACE /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-canary\r\n\r\n", `"type":"governor_error"`},
		{"TRACE /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-canary\r\n\r\n", `"type":"error","error":{"type":"governor_error"`},
		{"TRACE /governor/lanes HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`},
		{"TRACK /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`},
		{"PROPFIND /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", `"type":"governor_error"`},
		{"get /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`}, // methods are case-sensitive
		{"TRACE /v1/models HTTP/1.0\r\n\r\n", `"type":"governor_error"`},
	} {
		out := rawExchange(t, addr, tc.raw)
		method, _, _ := strings.Cut(tc.raw, " ")
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 405 "), "%s: %.300q", method, out)
		assert.Contains(t, out, "\r\nAllow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n", method)
		if !strings.Contains(tc.raw, "anthropic") { // Anthropic's shape has no code
			assert.Contains(t, out, `"code":"method_not_allowed"`, method)
		}
		assert.Contains(t, out, tc.shape, "%s: %.300q", method, out)
		assert.Contains(t, out, "\r\nConnection: close\r\n", method)
		assert.NotContains(t, out, "sk-canary", method)
	}
	// The asterisk form asks about Governor itself: OPTIONS * is answered
	// here, another method with it refused; neither reaches the provider.
	out := rawExchange(t, addr, "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	assert.True(t, strings.HasPrefix(out, "HTTP/1.1 204 "), "%.300q", out)
	assert.Contains(t, out, "\r\nAllow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n")
	out = rawExchange(t, addr, "GET * HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.True(t, strings.HasPrefix(out, "HTTP/1.1 400 "), "%.300q", out)
	assert.Contains(t, out, "only for OPTIONS")

	// The methods LLM APIs use still pass.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		out := rawExchange(t, addr, m+" /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), "%s: %.200q", m, out)
		assert.Equal(t, m+" /v1/x HTTP/1.1", <-lines, m)
	}
	assert.Empty(t, lines, "nothing else reached the provider")
}

// A client speaking HTTP/1.0 is forwarded in HTTP/1.1, Governor's own
// version: forwarded as HTTP/1.0, its call would close the upstream
// connection after each answer, and a stream would come back framed by
// that close alone.
func TestHTTP10CallsAreForwardedInHTTP11(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr)}))
	addr := strings.TrimPrefix(base, "http://")
	for _, raw := range []string{
		"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
	} {
		out := rawExchange(t, addr, raw)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.0 200 ") || strings.HasPrefix(out, "HTTP/1.1 200 "), "%.200q", out)
		assert.Equal(t, "POST /v1/chat/completions HTTP/1.1", <-lines, raw)
	}
}

// A client in HTTP/1.0 gets a stream framed by the close of the
// connection, as HTTP/1.0 frames a body of unknown length, never chunked
// (RFC 9112 §6.1: HTTP/1.0 has no chunked coding, and its client would
// read the chunk sizes as the body); the answer before it on the same
// connection comes first, whole.
func TestHTTP10ClientsGetStreamsEndedByTheClose(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{ChunkDelay: time.Millisecond, StreamChunks: 5})
	var logs logtest.Buffer
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock),
		AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
	addr := strings.TrimPrefix(base, "http://")
	const (
		chat   = `{"model":"gpt-a","messages":[{"role":"user","content":"Hello"}]}`
		stream = `{"model":"gpt-a","stream":true,"messages":[{"role":"user","content":"Hello"}]}`
	)
	req := func(body, conn string) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", conn, len(body), body)
	}
	// A JSON answer on a kept-alive connection, then a stream on it.
	out := rawExchange(t, addr, req(chat, "Connection: keep-alive\r\n")+req(stream, ""))
	r := bufio.NewReader(strings.NewReader(out))
	first, err := http.ReadResponse(r, nil)
	require.NoError(t, err, "%.300q", out)
	b, err := io.ReadAll(first.Body)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"object":"chat.completion"`)

	head, rest, ok := strings.Cut(out[len(out)-r.Buffered():], "\r\n\r\n")
	require.True(t, ok, "%.300q", out)
	assert.Contains(t, head, "200 OK")
	assert.NotContains(t, strings.ToLower(head), "transfer-encoding", head)
	assert.NotContains(t, strings.ToLower(head), "content-length", head)
	assert.Contains(t, head, "\r\nConnection: close", head)
	assert.Contains(t, head, "\r\nContent-Type: text/event-stream", head)
	assert.True(t, strings.HasPrefix(rest, "data: {"), "the body is the events as sent: %.100q", rest)
	assert.True(t, strings.HasSuffix(rest, "data: [DONE]\n\n"), "%.100q", rest)
	assert.Equal(t, 8, strings.Count(rest, "data: "), "the role, 5 chunks, the finish and [DONE]: %q", rest)

	require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 2 }, 5*time.Second, time.Millisecond)
	line := logs.Lines(t, "call")[1]
	assert.Equal(t, "done", line["stream_end"])
	assert.EqualValues(t, len(rest), line["bytes_out"], "the access log counts the bytes written")
}

// A request head with a line that ends in a bare LF gets 400 at once, and
// its connection is closed; nothing reaches the provider. (fasthttp finds
// the end of such a head but waits for a CR LF CR LF to parse it: the
// client waited for the read timeout, then got 408, unless the body held
// a CR LF CR LF, and then the call was forwarded.)
func TestHeadsWithBareLFAreRefusedAtOnce(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr), ReadTimeout: time.Hour}))
	addr := strings.TrimPrefix(base, "http://")
	exchange := func(parts ...string) string {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		for _, p := range parts {
			_, err := io.WriteString(conn, p)
			require.NoError(t, err)
		}
		// Far short of the read timeout: a head that waits for it
		// gets nothing.
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	for _, parts := range [][]string{
		{"GET /v1/models HTTP/1.1\nHost: x\n\n"},
		{"GET /v1/models HTTP/1.1\r\nHost: x\n\r\n"},
		{"GET /v1/models HTTP/1.1\r\nHost: x\r\n\n"},
		{"GET /v1/models HTTP/1.0\n\n"},
		{"GET /v1/models HTTP/1.1\r\nHost: x\n", "\n"},
		// A CR LF CR LF in the body let fasthttp parse the head.
		{"POST /v1/x HTTP/1.1\nHost: x\nContent-Length: 8\n\nab\r\n\r\ncd"},
		// A bare LF inside the head, which a proxy in front may not end
		// a field at.
		{"POST /v1/x HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n"},
	} {
		out := exchange(parts...)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 400 "), "%q: %.300q", parts, out)
		assert.Contains(t, out, "must end in CR LF", parts)
		assert.Contains(t, out, "\r\nConnection: close\r\n", parts)
	}
	assert.Empty(t, lines, "nothing reached the provider")

	// Heads of CR LF lines are served, with empty lines before them,
	// and bare LFs in their bodies.
	for _, raw := range []string{
		"\r\n\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\na\n\nb",
	} {
		out := exchange(raw)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), "%q: %.300q", raw, out)
		<-lines
	}

	// The next request on a kept-alive connection is read the same way.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	assert.Equal(t, 200, resp.StatusCode)
	<-lines
	io.WriteString(conn, "GET /v1/models HTTP/1.1\nHost: x\n\n")
	resp, err = http.ReadResponse(r, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 400, resp.StatusCode)
	assert.Empty(t, lines, "nothing else reached the provider")
}

// Governor's own streams (a batch's progress lines and results) reach a
// client in HTTP/1.0 framed by the close too, never chunked.
func TestHTTP10ClientsGetGovernorsStreamsEndedByTheClose(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	p, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Metrics: metrics.NewSet()})
	require.NoError(t, err)
	p.HandleAPI(APIPrefix+"lines", func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/x-ndjson")
		ctx.Response.SetBodyStream(io.NopCloser(strings.NewReader("{\"a\":1}\n{\"b\":2}\n")), -1)
	})
	addr := strings.TrimPrefix(serveProxy(t, p), "http://")
	out := rawExchange(t, addr, "GET /governor/lines HTTP/1.0\r\nHost: localhost\r\n\r\n")
	head, body, ok := strings.Cut(out, "\r\n\r\n")
	require.True(t, ok, "%q", out)
	assert.Contains(t, head, " 200 OK")
	assert.NotContains(t, strings.ToLower(head), "transfer-encoding", head)
	assert.Contains(t, head, "\r\nConnection: close", head)
	assert.Equal(t, "{\"a\":1}\n{\"b\":2}\n", body)

	out = rawExchange(t, addr, "GET /governor/lines HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	assert.Contains(t, out, "\r\nTransfer-Encoding: chunked\r\n", "HTTP/1.1 keeps its chunks")
}

// A client that asks for 100 Continue and whose body would be refused (too
// large, or no room for it) gets the refusal before it sends the body,
// not an invitation to send it for nothing (RFC 9110 §10.1.1); a client
// in HTTP/1.0 never gets a 100 Continue, a 1xx HTTP/1.0 does not have,
// and its call is served once its body arrives.
func TestExpectContinueIsAnsweredWithTheRefusal(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr), MaxBodyBytes: 1 << 20,
		MaxBufferedBytes: 3 << 19, ReadTimeout: time.Hour}))
	addr := strings.TrimPrefix(base, "http://")
	firstLine := func(conn net.Conn) string {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // far short of the read timeout
		line, err := bufio.NewReader(conn).ReadString('\n')
		require.NoError(t, err)
		return strings.TrimSpace(line)
	}
	dial := func(head string) net.Conn {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		_, err = io.WriteString(conn, head)
		require.NoError(t, err)
		return conn
	}
	const ask = "POST /v1/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
	assert.Equal(t, "HTTP/1.1 413 Request Entity Too Large", firstLine(dial(fmt.Sprintf(ask, 2<<20))), "over MaxBodyBytes")

	// A body of 1 MiB of the 1.5 holds its room (its client sends a byte).
	holder := dial(fmt.Sprintf("POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 1<<20))
	require.Eventually(t, func() bool { return p.budget.held.Load() == 1<<20 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, "HTTP/1.1 503 Service Unavailable", firstLine(dial(fmt.Sprintf(ask, 1<<20))), "no room for it")
	holder.Close()
	// With room, the client is invited to send its body.
	require.Eventually(t, func() bool { return p.budget.held.Load() == 0 }, 5*time.Second, time.Millisecond, "held %d", p.budget.held.Load())
	assert.Equal(t, "HTTP/1.1 100 Continue", firstLine(dial(fmt.Sprintf(ask, 2))))

	conn := dial("POST /v1/x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	io.WriteString(conn, "{}")
	assert.Equal(t, "HTTP/1.1 200 OK", firstLine(conn), "HTTP/1.0: no 100 Continue, the answer")
	assert.Equal(t, "POST /v1/x HTTP/1.1", <-lines)
	assert.Empty(t, lines)
}

// The fields of a chunked request body's trailer are dropped, never read
// as header fields nor forwarded as such: a proxy in front that vets
// header fields (x-api-key, X-Governor-Tenant) and passes trailers on
// would otherwise be bypassed (RFC 9110 §6.5.1).
func TestTrailerFieldsAreNotHeaderFields(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	got := make(chan http.Header, 4)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
		got <- r.Header.Clone()
		io.WriteString(w, "{}")
	}
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	addr := strings.TrimPrefix(base, "http://")
	out := rawExchange(t, addr, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Head: kept\r\n"+
		"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nd\r\n{\"model\":\"m\"}\r\n0\r\n"+
		"X-Api-Key: sk-trailer\r\nX-Governor-Tenant: other\r\nX-Injected: yes\r\n\r\n")
	assert.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), "%.300q", out)
	h := <-got
	assert.Equal(t, "kept", h.Get("X-Head"))
	assert.Equal(t, "13", h.Get("Content-Length"))
	for _, name := range []string{"X-Api-Key", "X-Governor-Tenant", "X-Injected"} {
		assert.Empty(t, h.Values(name), name)
	}
}

// A request head beyond the read buffer (16 KiB) gets 431, read by the
// client whole (the connection closes lingering, so the rest of the head
// the client still sends does not turn the close into a reset), and
// nothing reaches the provider.
func TestHeadTooLargeIs431(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr)}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	go io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 256<<10)+"\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, err := io.ReadAll(conn)
	assert.NoError(t, err, "the answer, then the close: no reset")
	assert.True(t, strings.HasPrefix(string(out), "HTTP/1.1 431 "), "%.300q", out)
	assert.Contains(t, string(out), "request head larger than 16384 bytes")
	assert.Empty(t, lines)
}
