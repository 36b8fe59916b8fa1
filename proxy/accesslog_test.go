package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/logtest"
	"github.com/llmgovernor/governor/mockllm"
)

// The access log has one line per forwarded call, with what an operator
// looks for: a plain call, a call retried after a 429, a stream (logged
// once it has ended, with the bytes it sent) and a call refused before it
// had a lane. The query, which may hold a key, is not logged.
func TestAccessLogOneLinePerCall(t *testing.T) {
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{ChunkDelay: time.Millisecond})
	var logs logtest.Buffer
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock),
		AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
	c := client(t)

	const plain = `{"model":"gpt-a","messages":[{"role":"user","content":"Hello"}]}`
	resp, body := post(t, c, base+"/v1/chat/completions?key=sk-canary", plain)
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 1 }, 5*time.Second, time.Millisecond)
	line := logs.Lines(t, "call")[0]
	assert.Equal(t, "POST", line["method"])
	assert.Equal(t, "/v1/chat/completions", line["path"])
	assert.Contains(t, line["lane"], "gpt-a")
	assert.EqualValues(t, 200, line["code"])
	assert.Equal(t, "COMPLETED", line["status"])
	assert.EqualValues(t, 1, line["attempts"])
	assert.EqualValues(t, len(plain), line["bytes_in"])
	assert.EqualValues(t, len(body), line["bytes_out"])
	assert.NotEmpty(t, line["request_id"], "mockllm sends x-request-id")
	for _, k := range []string{"queue_ms", "upstream_ms", "duration_ms"} {
		assert.Contains(t, line, k)
	}
	assert.NotContains(t, logs.String(), "sk-canary")

	// Retried after a 429.
	_, _ = chat(t, c, base, map[string]string{mockllm.HeaderFault: "429,ok", mockllm.HeaderRequestID: "req-retried", mockllm.HeaderRetryAfterMs: "1"})
	require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 2 }, 5*time.Second, time.Millisecond)
	line = logs.Lines(t, "call")[1]
	assert.Equal(t, "COMPLETED_WITH_RETRIES", line["status"])
	assert.EqualValues(t, 2, line["attempts"])
	assert.Equal(t, []any{"429 rate_limit_exceeded"}, line["errors"], "what the failed attempt got")

	const stream = `{"model":"gpt-a","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello"}]}`
	resp, body = post(t, c, base+"/v1/chat/completions", stream)
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 3 }, 5*time.Second, time.Millisecond)
	line = logs.Lines(t, "call")[2]
	assert.EqualValues(t, len(body), line["bytes_out"], "a stream's bytes, counted as it ended")
	assert.Equal(t, "COMPLETED", line["status"])
	assert.Equal(t, "done", line["stream_end"])
	assert.NotContains(t, logs.Lines(t, "call")[0], "stream_end", "an answer written whole has none")
	assert.NotContains(t, logs.Lines(t, "call")[0], "errors", "a call whose attempts all succeeded has none")

	resp, _ = chat(t, c, base, map[string]string{HeaderMaxRetries: "many", "X-Request-Id": "req-refused"})
	require.Equal(t, 400, resp.StatusCode)
	require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 4 }, 5*time.Second, time.Millisecond)
	line = logs.Lines(t, "call")[3]
	assert.EqualValues(t, 400, line["code"])
	assert.Equal(t, "FAILED", line["status"])
	assert.Equal(t, "", line["lane"])
	assert.Equal(t, "req-refused", line["request_id"], "without the provider's id, the request's")
}

// A stream's line says how it ended, which its status (set when its
// first byte went out) cannot: the provider's error event that ended it,
// a cut, a silence, or its client leaving.
func TestAccessLogSaysHowAStreamEnded(t *testing.T) {
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{ChunkDelay: time.Millisecond, StreamChunks: 20})
	var logs logtest.Buffer
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock), StreamIdleTimeout: 300 * time.Millisecond,
		Routes:    []Route{{Name: "anthropic", URL: mustURL(t, mock)}},
		AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
	c := client(t)
	const (
		chatStream     = `{"model":"gpt-a","stream":true,"messages":[{"role":"user","content":"Hello"}]}`
		messagesStream = `{"model":"claude-a","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`
	)
	for i, tc := range []struct{ path, body, fault, want string }{
		{"/anthropic/v1/messages", messagesStream, "overload-mid-stream", "overloaded_error"},
		{"/v1/chat/completions", chatStream, "overload-mid-stream", "server_error"},
		{"/v1/chat/completions", chatStream, "reset-mid-stream", "cut"},
		{"/v1/chat/completions", chatStream, "hang-mid-stream", "silent"},
	} {
		req, err := http.NewRequest("POST", base+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set(mockllm.HeaderFault, tc.fault)
		resp, err := c.Do(req)
		require.NoError(t, err, tc.fault)
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == i+1 }, 5*time.Second, time.Millisecond, tc.fault)
		line := logs.Lines(t, "call")[i]
		assert.Equal(t, "COMPLETED", line["status"], "%s: the status went out with the first byte", tc.fault)
		assert.Equal(t, tc.want, line["stream_end"], "%s %s", tc.path, tc.fault)
	}

	// The client leaves while the provider is silent, long before the
	// idle timeout.
	var patientLogs logtest.Buffer
	_, patient := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock), StreamIdleTimeout: time.Hour,
		AccessLog: slog.New(slog.NewJSONHandler(&patientLogs, nil))}))
	req, err := http.NewRequest("POST", patient+"/v1/chat/completions", strings.NewReader(chatStream))
	require.NoError(t, err)
	req.Header.Set(mockllm.HeaderFault, "hang-mid-stream")
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	resp.Body.Close()
	require.Eventually(t, func() bool { return len(patientLogs.Lines(t, "call")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, "client_gone", patientLogs.Lines(t, "call")[0]["stream_end"])
}

// Without AccessLog, a call logs nothing.
func TestNoAccessLogByDefault(t *testing.T) {
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{})
	var logs logtest.Buffer
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock), Logger: slog.New(slog.NewJSONHandler(&logs, nil))}))
	resp, _ := chat(t, client(t), base, nil)
	require.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, logs.Lines(t, "call"))
}
