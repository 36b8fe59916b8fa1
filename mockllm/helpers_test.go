package mockllm_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/mockllm"
)

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Hello there, how are you doing today, my good friend?"}]}`

const chatStreamBody = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello there, how are you doing today, my good friend?"}]}`

const messagesBody = `{"model":"claude-haiku-4-5","max_tokens":64,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"Hello there, how are you doing today, my good friend?"}]}]}`

const messagesStreamBody = `{"model":"claude-haiku-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello there, how are you doing today, my good friend?"}]}`

// wantText is the answer to the prompts above: the prefix and the first 40
// characters of the last user message.
const wantText = "Simulated answer to: Hello there, how are you doing today, my"

// start serves cfg on a real listener and returns the server, its base URL
// and a client of its own; both are closed when the test ends, and then no
// goroutine may be left.
func start(t *testing.T, cfg mockllm.Config) (*mockllm.Server, string, *http.Client) {
	t.Helper()
	leakcheck.Check(t)
	s, url, stop, err := mockllm.Start(cfg)
	require.NoError(t, err)
	tr := &http.Transport{}
	t.Cleanup(func() {
		stop()
		tr.CloseIdleConnections()
	})
	return s, url, &http.Client{Transport: tr}
}

// newRequest builds a request with headers given as name, value pairs.
func newRequest(t *testing.T, method, url, body string, hdr ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// post sends a request over the network and reads the whole answer.
func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(newRequest(t, http.MethodPost, url, body, hdr...))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// serve calls the handler directly, as the synctest tests do.
func serve(h http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// decode unmarshals a JSON object.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "body: %s", b)
	return m
}

// event is one server-sent event.
type event struct {
	name string
	data string
}

// parseEvents splits a complete SSE body into events, requiring each to be
// well formed.
func parseEvents(t *testing.T, body []byte) []event {
	t.Helper()
	s := string(body)
	require.True(t, strings.HasSuffix(s, "\n\n"), "stream must end with a blank line: %q", s)
	var evs []event
	for _, block := range strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n") {
		var ev event
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected SSE line %q in %q", line, block)
			}
		}
		evs = append(evs, ev)
	}
	return evs
}

// readEvent reads one event (up to a blank line) from a live stream.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "\n" {
			return b.String()
		}
		b.WriteString(line)
	}
}
