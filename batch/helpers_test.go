package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

// env is a Governor with the batch API in front of a simulated provider.
type env struct {
	mock    *mockllm.Server
	base    string // Governor's base URL
	c       *http.Client
	batches *batch.Server
	set     *metrics.Set
	// stop shuts Governor down (the provider stays); the test's end does
	// it otherwise.
	stop func()
}

type envOptions struct {
	mock mockllm.Config
	// upstream, if set, is a running provider to use instead of a new one,
	// at mockURL; mockURL alone is another server to use (env.mock is
	// then nil).
	upstream *mockllm.Server
	mockURL  string
	proxy    func(*proxy.Config)
	batch    func(*batch.Config)
}

// restartable starts a simulated provider and makes a batch directory
// that outlive the Governors a test starts on them (newEnv(t, opts)), as
// a restart on the same volume does.
func restartable(t *testing.T) (mock *mockllm.Server, dir string, opts envOptions) {
	t.Helper()
	mock, mockURL, stopMock, err := mockllm.Start(mockllm.Config{})
	require.NoError(t, err)
	t.Cleanup(stopMock)
	dir = t.TempDir()
	return mock, dir, envOptions{upstream: mock, mockURL: mockURL, batch: func(c *batch.Config) { c.Dir = dir }}
}

// newEnv starts a simulated provider, a Proxy and a batch Server on
// loopback; everything stops, and no goroutine is left, when the test ends.
func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	checkLeaks(t)
	mock, mockURL := o.upstream, o.mockURL
	if mock == nil && mockURL == "" {
		var stopMock func()
		var err error
		mock, mockURL, stopMock, err = mockllm.Start(o.mock)
		require.NoError(t, err)
		t.Cleanup(stopMock)
	}
	u, err := url.Parse(mockURL)
	require.NoError(t, err)

	set := metrics.NewSet()
	pcfg := proxy.Config{
		Upstream:    u,
		Routes:      []proxy.Route{{Name: "anthropic", URL: u}},
		BackoffBase: time.Millisecond,
		BackoffMax:  5 * time.Millisecond,
		// The simulated provider's concurrency cap answers Retry-After: 1;
		// honouring it whole would make the tests slow, not truer.
		MaxPause: 20 * time.Millisecond,
		// fasthttp's connection cleaners sleep this long before they end.
		IdleConnTimeout: time.Second,
		AIMD:            aimd.Config{Max: 16},
		Metrics:         set,
	}
	if o.proxy != nil {
		o.proxy(&pcfg)
	}
	p, err := proxy.New(pcfg)
	require.NoError(t, err)
	bcfg := batch.Config{Metrics: set}
	if o.batch != nil {
		o.batch(&bcfg)
	}
	bs, err := batch.New(p, bcfg)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	tr := &http.Transport{DisableCompression: true}
	stop := sync.OnceFunc(func() {
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, bs.Shutdown(ctx))
		assert.NoError(t, p.Shutdown(ctx))
		assert.NoError(t, <-done)
	})
	t.Cleanup(stop)
	return &env{mock: mock, base: "http://" + ln.Addr().String(), c: &http.Client{Transport: tr}, batches: bs, set: set, stop: stop}
}

// post sends body to path with the given headers and returns the answer,
// body read.
func (e *env) post(t testing.TB, path, contentType, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	return e.do(t, http.MethodPost, path, contentType, body, headers...)
}

func (e *env) do(t testing.TB, method, path, contentType, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// runBatch posts a JSON batch and decodes the answer.
func (e *env) runBatch(t *testing.T, body string, headers ...string) batch.Document {
	t.Helper()
	resp, out := e.post(t, batch.PathBatch, "application/json", body, headers...)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var doc batch.Document
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	return doc
}

// chatItem is a batch request for a chat completion saying content.
func chatItem(customID, content string, headers map[string]string) map[string]any {
	it := map[string]any{
		"url":  "/v1/chat/completions",
		"body": map[string]any{"model": "gpt-test", "messages": []any{map[string]any{"role": "user", "content": content}}},
	}
	if customID != "" {
		it["custom_id"] = customID
	}
	if headers != nil {
		it["headers"] = headers
	}
	return it
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// answerText is the assistant's text in a chat completion output.
func answerText(t *testing.T, output json.RawMessage) string {
	t.Helper()
	var o struct {
		StatusCode int `json:"status_code"`
		Body       struct {
			Choices []struct {
				Message struct{ Content string }
			}
		}
	}
	require.NoError(t, json.Unmarshal(output, &o), string(output))
	require.Equal(t, 200, o.StatusCode, string(output))
	require.Len(t, o.Body.Choices, 1, string(output))
	return o.Body.Choices[0].Message.Content
}

// counter reads a counter of the metrics set.
func (e *env) counter(t testing.TB, name string) int {
	t.Helper()
	var sb strings.Builder
	e.set.WritePrometheus(&sb)
	for line := range strings.SplitSeq(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var n int
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// checkLeaks fails the test if it leaves goroutines running; call it first.
func checkLeaks(t testing.TB) { leakcheck.Check(t) }
