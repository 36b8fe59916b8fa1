package proxy

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/logtest"
)

// A stream framed by the close of its connection alone (no Content-Length,
// not chunked) cannot say by its bytes that it was cut: one whose events
// Governor knows and that stops before its last one ([DONE], message_stop)
// is cut visibly for the client (a read error, as for a chunked stream cut
// between chunks) and logged stream_end "cut"; one that reaches its last
// event, one ended by the provider's error event, and one of a shape
// Governor does not know end cleanly.
func TestStreamEndedByTheCloseBeforeItsLastEventIsCut(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const (
		head  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
		chunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"Hi"}}]}` + "\n\n"
		start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\"}}\n\n"
		delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n"
	)
	for _, tc := range []struct {
		name, events, end string
	}{
		{"OpenAI, closed before [DONE]", chunk + chunk, "cut"},
		{"OpenAI, closed half way through an event", chunk + `data: {"id":"c1","obj`, "cut"},
		{"Anthropic, closed before message_stop", start + delta, "cut"},
		{"OpenAI, [DONE] then the close", chunk + "data: [DONE]\n\n", "done"},
		{"OpenAI, [DONE] without its line end", chunk + "data: [DONE]", "done"},
		{"Anthropic, message_stop then the close", start + delta + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "done"},
		{"Anthropic, ended by an overload", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "overloaded_error"},
		{"a shape Governor does not know", "data: hello\n\n", "done"},
	} {
		up := cuttingUpstream(t, func(c *net.TCPConn, _ int) { io.WriteString(c, head+tc.events) })
		var logs logtest.Buffer
		set := newSet()
		p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), Metrics: set, AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
		resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, tc.name)
		assert.Equal(t, tc.events, string(body), "%s: the events arrive as sent", tc.name)
		if tc.end == "cut" {
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s: the client sees the cut", tc.name)
		} else {
			assert.NoError(t, err, tc.name)
		}
		require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 1 }, 5*time.Second, time.Millisecond, tc.name)
		assert.Equal(t, tc.end, logs.Lines(t, "call")[0]["stream_end"], tc.name)
		outcome := map[string]string{"cut": "connection_error", "done": "answered", "overloaded_error": "rate_limited"}[tc.end]
		l := lanesOf(t, client(t), base)
		require.Len(t, l, 1, tc.name)
		assert.Equal(t, "1", sampleOf(promText(set), fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q}", l[0].ID, outcome)), tc.name)

		// A batch item's stream, read whole, fails its attempt the same way.
		res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`), MaxRetries: 0})
		if tc.end == "cut" {
			assert.Equal(t, []string{"200 stream cut before its last event"}, res.Details.Errors, tc.name)
		} else if tc.end == "done" {
			assert.Empty(t, res.Details.Errors, tc.name)
		}
	}
}

// gzippingProvider streams events gzip-compressed to a request that
// accepts gzip (or names no encoding: then any is acceptable), flushed
// event by event, and as they are otherwise; it sends each accepted
// encoding it was asked for on asked.
func gzippingProvider(t *testing.T, events ...string) (url string, asked <-chan string) {
	t.Helper()
	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		ae := r.Header.Get("Accept-Encoding")
		got <- ae
		w.Header().Set("Content-Type", "text/event-stream")
		var out io.Writer = w
		var flush func()
		if ae == "" || strings.Contains(ae, "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			gz := gzip.NewWriter(w)
			defer gz.Close()
			out, flush = gz, func() { gz.Flush(); w.(http.Flusher).Flush() }
		} else {
			flush = w.(http.Flusher).Flush
		}
		for _, e := range events {
			io.WriteString(out, e)
			flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

// A streamed call goes upstream asking for no compression, whatever the
// client accepts: Governor reads its events as they pass (usage, an
// overload that ends it), which it could not do compressed, and passes
// them on as they came. An answer that is not a stream keeps the client's
// Accept-Encoding (a JSON answer is read decompressed).
func TestStreamsAreAskedForUncompressed(t *testing.T) {
	checkLeaks(t)
	const (
		chunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"Hi"}}]}` + "\n\n"
		usage = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":11,"total_tokens":18}}` + "\n\n"
		start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
		over  = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	)
	for _, tc := range []struct {
		name, path, body, end string
		events                []string
		tokens                int
	}{
		{"OpenAI, usage at the end", "/v1/chat/completions", `{"model":"gpt-a","stream": true,"stream_options":{"include_usage":true}}`,
			"done", []string{chunk, usage, "data: [DONE]\n\n"}, 11},
		{"Anthropic, ended by an overload", "/anthropic/v1/messages", `{"model":"claude","stream":true,"max_tokens":9}`,
			"overloaded_error", []string{start, over}, 1},
	} {
		up, asked := gzippingProvider(t, tc.events...)
		set := metrics.NewSet()
		var logs logtest.Buffer
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), Metrics: set,
			Routes:    []Route{{Name: "anthropic", URL: mustURL(t, up)}},
			AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
		req, err := http.NewRequest("POST", base+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br") // as the SDKs send it
		resp, err := client(t).Do(req)
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, tc.name)
		assert.Equal(t, "identity", <-asked, tc.name)
		assert.Empty(t, resp.Header.Get("Content-Encoding"), tc.name)
		assert.Equal(t, strings.Join(tc.events, ""), string(body), "%s: the events as sent", tc.name)
		require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 1 }, 5*time.Second, time.Millisecond, tc.name)
		assert.Equal(t, tc.end, logs.Lines(t, "call")[0]["stream_end"], tc.name)
		assert.Equal(t, tc.tokens, tokensOf(set, "completion"), "%s: its usage is counted", tc.name)
	}

	// Not a stream: the client's Accept-Encoding goes upstream.
	up, asked := gzippingProvider(t, `{"id":"x"}`)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":false,"messages":[{"content":"say \"stream\": true"}]}`))
	require.NoError(t, err)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, "gzip", <-asked)
	assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
}

func TestAsksForStream(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stream":true}`:                           true,
		`{"model":"m", "stream" : true ,"x":1}`:     true,
		"{\"stream\":\n\ttrue}":                     true,
		`{"stream":false}`:                          false,
		`{"stream_options":{"include_usage":true}}`: false,
		`{"content":"say \"stream\": true"}`:        false,
		`{"role":"stream","stream":false}`:          false,
		`{}`:                                        false,
		`"stream"`:                                  false,
	} {
		assert.Equal(t, want, asksForStream([]byte(body)), body)
	}
}

// A JSON answer framed by its connection's close alone (no Content-Length,
// not chunked: an HTTP/1.0 server, Python's http.server) that the provider
// closes before the JSON's end is cut, as a chunked one cut short is: it
// is retried, never passed on as a complete 200; whole, or of another
// type, it is taken as it came.
func TestJSONAnswerEndedByTheCloseIsRetriedWhenCut(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
	closeCut := func(c *net.TCPConn) { io.WriteString(c, head+`{"id":"x`) }
	closeWhole := func(c *net.TCPConn) { io.WriteString(c, head+`{"id":"xyz1"}`) }

	up := cuttingUpstream(t, func(c *net.TCPConn, n int) {
		if n%2 == 1 {
			closeCut(c)
			return
		}
		closeWhole(c)
	})
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	resp, body := chat(t, client(t), base, nil)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, `{"id":"xyz1"}`, body, "the retried answer, whole")
	assert.Equal(t, string(StatusCompletedWithRetries), resp.Header.Get(HeaderStatus))
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
	// A batch item's answer, read whole by Do, the same way.
	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"model":"m"}`),
		Header: map[string]string{"Content-Type": "application/json"}, MaxRetries: -1})
	require.Nil(t, res.Err)
	assert.Equal(t, `{"id":"xyz1"}`, string(res.Body))
	assert.Equal(t, 2, res.Details.Attempts)

	always := cuttingUpstream(t, func(c *net.TCPConn, _ int) { closeCut(c) })
	_, base = startProxy(t, fastRetries(Config{Upstream: mustURL(t, always), MaxRetries: 2}))
	resp, body = chat(t, client(t), base, nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
	assert.Equal(t, "3", resp.Header.Get(HeaderAttempts))
	assert.Contains(t, body, "before the end of a JSON answer")

	text := cuttingUpstream(t, func(c *net.TCPConn, _ int) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n{\"id\":\"x")
	})
	_, base = startProxy(t, fastRetries(Config{Upstream: mustURL(t, text)}))
	resp, body = chat(t, client(t), base, nil)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, `{"id":"x`, body, "not JSON: as it came")
	assert.Equal(t, "1", resp.Header.Get(HeaderAttempts))
}

// An upstream whose answer head has lines that end in a bare LF gets its
// attempt failed at once as a connection error, and retried, plain or
// over TLS: fasthttp's client would wait for the rest of a head that has
// ended until the attempt's deadline (10 minutes by default), and the
// controller would hear a provider too slow to answer.
func TestAnswerHeadWithBareLFIsRetriedAtOnce(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const (
		bare  = "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 13\n\n{\"id\":\"bare\"}"
		whole = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"id\":\"xyz1\"}"
	)
	for _, secure := range []bool{false, true} {
		var n atomic.Int32
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			c, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			if n.Add(1) == 1 {
				buf.WriteString(bare)
				buf.Flush()
				// Held open, as a keep-alive server would: only the
				// attempt timeout would end the wait.
				io.Copy(io.Discard, c)
				return
			}
			buf.WriteString(whole)
			buf.Flush()
		}))
		cfg := fastRetries(Config{AttemptTimeout: time.Hour})
		if secure {
			up.StartTLS()
			pool := x509.NewCertPool()
			pool.AddCert(up.Certificate())
			cfg.TLSConfig = &tls.Config{RootCAs: pool}
		} else {
			up.Start()
		}
		cfg.Upstream = mustURL(t, up.URL)
		_, base := startProxy(t, cfg)
		resp, body := chat(t, client(t), base, nil)
		assert.Equal(t, 200, resp.StatusCode, "TLS %v: %s", secure, body)
		assert.Equal(t, `{"id":"xyz1"}`, body, "TLS %v: the retry's answer", secure)
		assert.Equal(t, "2", resp.Header.Get(HeaderAttempts), "TLS %v", secure)
		up.CloseClientConnections()
		up.Close()
	}
}

// The head of a stream reaches the client as soon as the provider's does,
// before the first event, for an NDJSON stream (Ollama's native API) as
// for an event stream: a model that takes a minute to load must not look
// like a dead connection.
func TestStreamHeadsArriveBeforeTheirFirstEvent(t *testing.T) {
	checkLeaks(t)
	for _, ct := range []string{"text/event-stream", "application/x-ndjson"} {
		release := make(chan struct{})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-release
			io.WriteString(w, "{\"done\":true}\n")
		}))
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free) // before the proxy's shutdown, should the test end early
		// Far longer than the head takes to come: without it, the
		// client would wait as long as the provider holds the line.
		tr := &http.Transport{ResponseHeaderTimeout: 30 * time.Second}
		resp, err := (&http.Client{Transport: tr}).Post(base+"/api/chat", "application/json", strings.NewReader(`{"model":"llama3"}`))
		require.NoError(t, err, "%s: the head comes while the provider holds the first line", ct)
		assert.Equal(t, ct, resp.Header.Get("Content-Type"))
		free()
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, ct)
		assert.Equal(t, "{\"done\":true}\n", string(body), ct)
		tr.CloseIdleConnections()
		up.Close()
	}
}

// An NDJSON stream (Ollama's native API) framed by the close of its
// connection alone is cut the same way when it stops before its last line
// ("done":true) or an error line: visibly for the client, logged
// stream_end "cut", counted as a connection error (the lane hears it
// once the stream has ended), and a batch item's attempt fails as a cut.
func TestNDJSONStreamEndedByTheCloseBeforeItsLastLineIsCut(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const (
		head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n"
		line = `{"model":"llama3","created_at":"2026-11-26T19:00:00Z","message":{"role":"assistant","content":"Hi"},"done":false}` + "\n"
		last = `{"model":"llama3","created_at":"2026-11-26T19:00:01Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","eval_count":2}` + "\n"
	)
	for _, tc := range []struct {
		name, lines string
		cut         bool
	}{
		{"closed before the last line", line + line, true},
		{"closed half way through a line", line + `{"model":"llama3","crea`, true},
		{"closed half way through the last line", line + last[:40], true},
		{"a line that quotes done true", line + `{"message":{"content":"\"done\":true"},"done":false}` + "\n", true},
		{"the last line then the close", line + last, false},
		{"the last line without its line end", line + strings.TrimSuffix(last, "\n"), false},
		{"the last line, spaced", line + `{"model": "llama3", "done": true}` + "\n", false},
		{"ended by an error line", line + `{"error":"model runner has unexpectedly stopped"}` + "\n", false},
	} {
		up := cuttingUpstream(t, func(c *net.TCPConn, _ int) { io.WriteString(c, head+tc.lines) })
		var logs logtest.Buffer
		set := newSet()
		p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), Metrics: set, AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
		resp, err := client(t).Post(base+"/api/chat", "application/json", strings.NewReader(`{"model":"llama3"}`))
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, tc.name)
		assert.Equal(t, tc.lines, string(body), "%s: the lines arrive as sent", tc.name)
		end := "done"
		if tc.cut {
			end = "cut"
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s: the client sees the cut", tc.name)
		} else {
			assert.NoError(t, err, tc.name)
		}
		require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 1 }, 5*time.Second, time.Millisecond, tc.name)
		assert.Equal(t, end, logs.Lines(t, "call")[0]["stream_end"], tc.name)
		outcome := "answered"
		if tc.cut {
			outcome = "connection_error"
		}
		l := lanesOf(t, client(t), base)
		require.Len(t, l, 1, tc.name)
		assert.Equal(t, "1", sampleOf(promText(set), fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q}", l[0].ID, outcome)), tc.name)

		res := p.Do(context.Background(), &Call{Path: "/api/chat", Body: []byte(`{"model":"llama3"}`), MaxRetries: 0})
		if tc.cut {
			assert.Equal(t, []string{"connection error: read upstream body: upstream closed the connection before the stream's last event"},
				res.Details.Errors, tc.name)
		} else {
			assert.Empty(t, res.Details.Errors, tc.name)
			assert.Equal(t, tc.lines, string(res.Body), tc.name)
		}
	}
}
