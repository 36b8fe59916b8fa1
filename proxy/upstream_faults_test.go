package proxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// checkSockets fails the test if it leaves more sockets open in the process
// than it found, once everything it set up has been cleaned up: clients,
// Governor and the provider all live in the test process, so this counts
// every connection of the test on both ends. Call it first, before
// checkLeaks, so that its cleanup runs last. Linux only.
func checkSockets(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	base := openSockets(t)
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		n := openSockets(t)
		for n > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling for connections to close, not papering over a race
			n = openSockets(t)
		}
		if n > base {
			t.Errorf("%d sockets left open (%d before the test, %d after)", n-base, base, n)
		}
	})
}

func openSockets(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

// governorError decodes Governor's own error body.
func governorError(t *testing.T, body string) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	require.Equal(t, "governor_error", e.Error.Type, body)
	return e.Error.Code, e.Error.Message
}

// Every upstream fault, on a JSON call or a stream, ends within the
// configured timeouts: with a retry that succeeds, or — once the retry
// budget is spent — with the provider's last answer or a Governor error that
// says why. Afterwards Governor is healthy, and goroutines and sockets are
// back to where they were.
func TestUpstreamFaultMatrix(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Latency: 5 * time.Millisecond, ChunkDelay: time.Millisecond})
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedAddr := refused.Addr().String()
	refused.Close() // nothing listens there now: connection refused
	cfg := fastRetries(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: 300 * time.Millisecond,
		Routes: []Route{{Name: "down", URL: mustURL(t, "http://"+refusedAddr)}}})
	_, base := startProxy(t, cfg)
	c := client(t)

	const budget = "2" // X-Governor-Max-Retries: three attempts in all
	for _, tc := range []struct {
		name, path, fault string
		stream            bool
		status            int
		attempts          string
		code              string // Governor's error code, when it answers itself
	}{
		// Retried to success.
		{"stream reset before headers", "", "reset", true, 200, "2", ""},
		{"stream hang before headers", "", "hang", true, 200, "2", ""},
		{"stream 529 then 500", "", "529,500", true, 200, "3", ""},
		{"502 then 503", "", "502,503", false, 200, "3", ""},
		{"504", "", "504", false, 200, "2", ""},
		// The budget spent.
		{"reset every time", "", "reset,reset,reset", false, 502, "3", CodeUpstreamUnreachable},
		{"answer cut every time", "", "reset-mid-stream,reset-mid-stream,reset-mid-stream", false, 502, "3", CodeUpstreamUnreachable},
		{"hang every time", "", "hang,hang,hang", false, 504, "3", CodeUpstreamTimeout},
		{"stream reset every time", "", "reset,reset,reset", true, 502, "3", CodeUpstreamUnreachable},
		{"529 every time", "", "529,529,529", false, 529, "3", ""},
		{"503 every time", "", "503,503,503", false, 503, "3", ""},
		{"connection refused", "/down", "", false, 502, "3", CodeUpstreamUnreachable},
	} {
		id := "matrix-" + strings.ReplaceAll(tc.name, " ", "-")
		req, err := http.NewRequest("POST", base+tc.path+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":`+map[bool]string{true: "true", false: "false"}[tc.stream]+`,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("X-Request-Id", id)
		req.Header.Set(HeaderMaxRetries, budget)
		if tc.fault != "" {
			req.Header.Set(mockllm.HeaderFault, tc.fault)
		}
		resp, err := c.Do(req)
		require.NoError(t, err, tc.name)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, "%s: the answer arrives whole", tc.name)
		body := string(b)

		assert.Equal(t, tc.status, resp.StatusCode, "%s: %s", tc.name, body)
		assert.Equal(t, tc.attempts, resp.Header.Get(HeaderAttempts), tc.name)
		if tc.path == "" {
			assert.Equal(t, tc.attempts, itoa(mock.Stats().ByRequestID[id]), "%s: the provider saw each attempt once", tc.name)
		}
		switch {
		case tc.status == 200 && tc.stream:
			assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus), tc.name)
			assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "%s: a whole stream: %q", tc.name, body)
		case tc.status == 200:
			assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus), tc.name)
			assert.Contains(t, body, "Simulated answer", tc.name)
		default:
			assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus), tc.name)
			assert.Equal(t, "false", resp.Header.Get(HeaderShouldRetry), "%s: SDKs must not retry again", tc.name)
			if tc.code != "" {
				code, msg := governorError(t, body)
				assert.Equal(t, tc.code, code, tc.name)
				assert.NotEmpty(t, msg, tc.name)
			} else {
				assert.NotContains(t, body, "governor_error", "%s: the provider's own last answer", tc.name)
			}
		}
	}

	// Governor is healthy: nothing in flight or queued, and a plain call
	// goes through.
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 0 }, 5*time.Second, 10*time.Millisecond)
	for _, l := range lanesOf(t, c, base) {
		assert.Zero(t, l.InFlight, l.ID)
		assert.Zero(t, l.Queued, l.ID)
	}
	resp, body := chat(t, c, base, nil)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, "COMPLETED", resp.Header.Get(HeaderStatus))
}
