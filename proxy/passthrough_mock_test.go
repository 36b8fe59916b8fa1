package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

func startMock(t *testing.T, cfg mockllm.Config) (*mockllm.Server, string) {
	t.Helper()
	s, base, stop, err := mockllm.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(stop)
	return s, base
}

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, b
}

func TestBodiesByteIdenticalToDirect(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{ChunkDelay: time.Millisecond})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, mock)}}}))
	c := client(t)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`},
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello"}]}`},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"]}`},
		{"/anthropic/v1/messages", `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`},
		{"/anthropic/v1/messages", `{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`},
	} {
		directPath := strings.TrimPrefix(tc.path, "/anthropic")
		dresp, direct := post(t, c, mock+directPath, tc.body)
		gresp, governed := post(t, c, base+tc.path, tc.body)
		assert.Equal(t, 200, dresp.StatusCode, tc.body)
		assert.Equal(t, dresp.StatusCode, gresp.StatusCode, tc.body)
		assert.Equal(t, string(direct), string(governed), "%s %s", tc.path, tc.body)
		assert.Equal(t, dresp.Header.Get("Content-Type"), gresp.Header.Get("Content-Type"), tc.body)
		assert.Equal(t, "COMPLETED", gresp.Header.Get(HeaderStatus), tc.body)
		assert.Equal(t, "1", gresp.Header.Get(HeaderAttempts), tc.body)
		assert.NotEmpty(t, gresp.Header.Get(HeaderQueueMs), tc.body)
	}
}

func TestFirstEventArrivesBeforeProviderFinishes(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{ChunkDelay: 100 * time.Millisecond, StreamChunks: 8})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))

	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"Hello"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(line, "data: {"), line)
	st := mock.Stats()
	assert.Equal(t, int64(1), st.StreamsStarted)
	assert.Equal(t, int64(0), st.StreamsCompleted, "the first event must reach the client before the provider produced the last")
}

func TestClientLeavingMidStreamIsSeenByProvider(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{ChunkDelay: 200 * time.Millisecond, StreamChunks: 50})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"Hello"}]}`))
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool { return mock.Stats().StreamsAborted == 1 }, 10*time.Second, 10*time.Millisecond,
		"the provider must see its stream closed")
	assert.Equal(t, int64(0), mock.Stats().StreamsCompleted)
}
