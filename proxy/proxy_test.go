package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startProxy runs a Proxy for cfg on a loopback port and returns its base
// URL. It is shut down when the test ends.
func startProxy(t *testing.T, cfg Config) (*Proxy, string) {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	p, err := New(cfg)
	require.NoError(t, err)
	return p, serveProxy(t, p)
}

// serveProxy serves p on a port of its own, shuts it down when the test
// ends, and returns its base URL.
func serveProxy(t *testing.T, p *Proxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, p.Shutdown(ctx))
		assert.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}

// client returns an HTTP client whose idle connections are closed when the
// test ends, so leak checks see no leftovers.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func TestForwardPassesRequestThroughUnchanged(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	type seen struct {
		method, uri, host, body string
		header                  http.Header
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, string(b), r.Header.Clone()}
		w.Header().Set("X-Upstream", "yes")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})

	req, _ := http.NewRequest("POST", base+"/v1/chat/completions?api-version=2024-10&x=%2F", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("User-Agent", "OpenAI/JS 4.0")
	req.Header.Set("X-Custom", "v")
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)

	assert.Equal(t, 201, resp.StatusCode)
	assert.Equal(t, `{"ok":true}`, string(body))
	assert.Equal(t, "yes", resp.Header.Get("X-Upstream"))
	s := <-got
	assert.Equal(t, "POST", s.method)
	assert.Equal(t, "/v1/chat/completions?api-version=2024-10&x=%2F", s.uri)
	assert.Equal(t, strings.TrimPrefix(up.URL, "http://"), s.host, "Host is the upstream's")
	assert.Equal(t, `{"model":"m"}`, s.body)
	assert.Equal(t, "Bearer sk-test", s.header.Get("Authorization"))
	assert.Equal(t, "OpenAI/JS 4.0", s.header.Get("User-Agent"))
	assert.Equal(t, "v", s.header.Get("X-Custom"))
}

func TestHopByHopHeadersStrippedBothWays(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		h := w.Header()
		h.Set("Connection", "X-Up-Hop")
		h.Set("X-Up-Hop", "secret-of-this-hop")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("Upgrade", "h2c")
		h.Set("X-Up-End", "end-to-end")
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})

	req, _ := http.NewRequest("GET", base+"/v1/models", nil)
	req.Header.Set("Connection", "X-Client-Hop, keep-alive")
	req.Header.Set("X-Client-Hop", "hop")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Authorization", "Basic abc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("X-Client-End", "end-to-end")
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	in := <-got
	for _, h := range []string{"X-Client-Hop", "Keep-Alive", "Proxy-Authorization", "Te", "Upgrade"} {
		assert.Empty(t, in.Get(h), "request header %s reached the upstream", h)
	}
	assert.NotContains(t, strings.ToLower(in.Get("Connection")), "x-client-hop")
	assert.Equal(t, "end-to-end", in.Get("X-Client-End"))
	for _, h := range []string{"X-Up-Hop", "Keep-Alive", "Proxy-Authenticate", "Upgrade"} {
		assert.Empty(t, resp.Header.Get(h), "response header %s reached the client", h)
	}
	assert.Equal(t, "end-to-end", resp.Header.Get("X-Up-End"))
}

// Each header that must not cross the proxy is stripped also when it is the
// only one, in any case: the proxy skips stripping for messages that have
// none, so each one alone must be seen.
func TestEachStrippedHeaderAloneIsStripped(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	got := make(chan *http.Request, 1)
	respHop := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		if h := <-respHop; h != "" {
			w.Header().Set(h, "hop")
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})
	addr := strings.TrimPrefix(base, "http://")

	send := func(t *testing.T, raw string) *http.Response {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		_, err = io.WriteString(conn, raw)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, h := range []string{"proxy-connection", "keep-alive", "proxy-authorization", "te", "upgrade",
		"x-governor-max-retries", "x-governor-token", "expect"} {
		value := "1"
		if h == "expect" {
			value = "100-continue"
		}
		respHop <- ""
		send(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+h+": "+value+"\r\nContent-Length: 2\r\n\r\n{}")
		r := <-got
		assert.Empty(t, r.Header.Get(h), "request header %s reached the upstream", h)
	}
	// Connection alone, and a header named only by it.
	respHop <- ""
	send(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nconnection: x-hop\r\nx-hop: 1\r\nContent-Length: 2\r\n\r\n{}")
	r := <-got
	assert.Empty(t, r.Header.Get("X-Hop"), "a header named in Connection reached the upstream")

	for _, h := range []string{"Keep-Alive", "Proxy-Authenticate", "Upgrade", "Te", "Proxy-Connection"} {
		respHop <- h
		resp := send(t, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		<-got
		assert.Empty(t, resp.Header.Get(h), "response header %s reached the client", h)
	}
}

func TestPrefixRouteStripsPrefix(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	paths := make(chan string, 2)
	handler := func(tag string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths <- tag + " " + r.URL.RequestURI()
			io.WriteString(w, tag)
		})
	}
	def := httptest.NewServer(handler("default"))
	defer def.Close()
	anth := httptest.NewServer(handler("anthropic"))
	defer anth.Close()
	_, base := startProxy(t, Config{
		Upstream: mustURL(t, def.URL),
		Routes:   []Route{{Name: "anthropic", URL: mustURL(t, anth.URL+"/base/")}},
	})
	c := client(t)
	for _, tc := range []struct{ path, want string }{
		{"/anthropic/v1/messages?beta=true", "anthropic /base/v1/messages?beta=true"},
		{"/v1/chat/completions", "default /v1/chat/completions"},
		{"/anthropicx/v1", "default /anthropicx/v1"},
		{"/anthropic/../v1/models", "default /v1/models"},
	} {
		resp, err := c.Post(base+tc.path, "application/json", strings.NewReader("{}"))
		require.NoError(t, err, tc.path)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, tc.want, <-paths, tc.path)
	}
}

func TestHTTPSUpstream(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over tls "+r.Host)
	}))
	defer up.Close()
	pool := up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), TLSConfig: &tls.Config{RootCAs: pool}})
	resp, err := client(t).Get(base + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "over tls "+strings.TrimPrefix(up.URL, "https://"), string(body))
}

func TestUnreachableUpstreamIsOpenAIShaped502(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	addr := "127.0.0.1:1" // nothing listens there (tcpmux)
	_, base := startProxy(t, fastRetries(Config{
		Upstream: mustURL(t, "http://"+addr),
		Routes:   []Route{{Name: "anthropic", URL: mustURL(t, "http://"+addr)}},
	}))

	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 502, resp.StatusCode)
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus))
	assert.Equal(t, "11", resp.Header.Get(HeaderAttempts), "first attempt and the default 10 retries")
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "governor_error", e.Error.Type)
	assert.Equal(t, CodeUpstreamUnreachable, e.Error.Code)
	assert.Contains(t, e.Error.Message, addr)

	resp, err = client(t).Post(base+"/anthropic/v1/messages", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var a struct {
		Type  string
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	assert.Equal(t, 502, resp.StatusCode)
	assert.Equal(t, "error", a.Type, "Anthropic's error shape on the anthropic route")
	assert.Equal(t, "governor_error", a.Error.Type)
}

func TestBodyLargerThanLimitIs413(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	hits := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits <- struct{}{} }))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), MaxBodyBytes: 1024})
	resp, err := client(t).Post(base+"/v1/embeddings", "application/json", strings.NewReader(strings.Repeat("x", 2048)))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 413, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "application/json")
	assert.Empty(t, hits, "an oversized body must not reach the upstream")
}

// An answer that takes many reads from the upstream connection is read
// whole, at the first attempt: a JSON answer of known length that the round
// trip buffers, and one of unknown length (chunked) that Do reads to its
// end. (Each used to fail at its second read: gathering the body in the
// response closed the stream, and with it the connection.)
func TestAnswersOfManyReadsAreReadWhole(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	big := `{"x":"` + strings.Repeat("a", 100<<10) + `"}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Known-Length") != "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		}
		io.WriteString(w, big)
	}))
	defer up.Close()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))

	resp, body := chat(t, client(t), base, map[string]string{"X-Known-Length": "1"})
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get(HeaderAttempts))
	assert.True(t, body == big, "the answer whole: %d bytes of %d", len(body), len(big))
	for _, header := range []map[string]string{{"X-Known-Length": "1"}, nil} {
		res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Header: header, Body: []byte(`{}`)})
		require.Nil(t, res.Err, "%v", header)
		assert.Equal(t, 200, res.StatusCode, "%v", header)
		assert.Equal(t, 1, res.Details.Attempts, "%v", header)
		assert.True(t, string(res.Body) == big, "%v: the answer whole: %d bytes of %d", header, len(res.Body), len(big))
	}
}

func TestUnknownGovernorPathIs404(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("upstream got %s", r.URL.Path)
	}))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})
	resp, err := client(t).Get(base + "/governor/nope")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)
}

// sseUpstream streams n events; event i>0 is sent only after next is
// signalled, so a test can prove what the client saw before the upstream
// produced more.
func sseUpstream(t *testing.T, n int, next <-chan struct{}, gone chan<- struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		for i := range n {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					gone <- struct{}{}
					return
				}
			}
			if _, err := io.WriteString(w, "data: event "+string(rune('0'+i))+"\n\n"); err != nil {
				gone <- struct{}{}
				return
			}
			f.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
}

func TestStreamEventsArriveAsProduced(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	next := make(chan struct{})
	up := sseUpstream(t, 3, next, make(chan struct{}, 1))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})

	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err, "headers must arrive before the stream ends")
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Empty(t, resp.Header.Get("Content-Encoding"))
	r := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		// The upstream has not produced event i+1 yet: it waits for us.
		assert.Equal(t, "data: event "+string(rune('0'+i))+"\n", line)
		_, _ = r.ReadString('\n')
		if i < 2 {
			next <- struct{}{}
		}
	}
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "data: [DONE]\n\n", string(rest))
}

func TestClientLeavingMidStreamClosesUpstream(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	gone := make(chan struct{}, 1)
	up := sseUpstream(t, 3, make(chan struct{}), gone)
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: event 0\n", line)
	cancel() // the client goes away mid-stream
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never saw its client go away")
	}
}

func TestStalledStreamIsEndedAfterIdleTimeout(t *testing.T) {
	gone := make(chan struct{}, 1)
	up := sseUpstream(t, 3, make(chan struct{}), gone) // never sends event 1
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: 200 * time.Millisecond})

	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	assert.Error(t, err, "a cut stream must not look complete to the client")
	assert.Equal(t, "data: event 0\n\n", string(body))
	<-gone // and the upstream connection is closed
}

func TestStreamOutlivesAttemptTimeout(t *testing.T) {
	next := make(chan struct{})
	up := sseUpstream(t, 2, next, make(chan struct{}, 1))
	defer up.Close()
	const attempt = 100 * time.Millisecond
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), AttemptTimeout: attempt})

	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	_, err = r.ReadString('\n')
	require.NoError(t, err)
	// Wait past the attempt timeout: it covers the headers, not the stream.
	time.Sleep(3 * attempt)
	next <- struct{}{}
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: event 1\n\ndata: [DONE]\n\n", string(rest))
}
