package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
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
// says why. The provider never sees more attempts than Governor reports (no
// hidden retry), and exactly as many when each attempt ends with the
// provider's answer or reset. Afterwards Governor is healthy, and goroutines
// and sockets are back to where they were.
//
// A hang ends by the attempt timeout, which also bounds the attempts around
// it: on a loaded machine an attempt may run out of time before the
// provider has read its request (the request may not even have been
// written), so the provider sees fewer attempts than Governor made, and
// a retry after a hang may itself run out of time. The hangs therefore go
// through a Governor with a short attempt timeout, and the other faults
// through one whose attempts only the provider ends.
func TestUpstreamFaultMatrix(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Latency: 5 * time.Millisecond, ChunkDelay: time.Millisecond})
	refusedAddr := "127.0.0.1:1" // nothing listens there (tcpmux): connection refused
	routes := []Route{{Name: "down", URL: mustURL(t, "http://"+refusedAddr)}}
	_, patient := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: time.Minute, Routes: routes}))
	_, impatient := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: 300 * time.Millisecond}))
	c := client(t)

	const budget = "2" // X-Governor-Max-Retries: three attempts in all
	for _, tc := range []struct {
		name, path, fault string
		stream            bool
		status            int
		attempts          int
		code              string // Governor's error code, when it answers itself
		// hang: the fault is a hang, which the attempt timeout ends.
		// The call goes through the impatient Governor; a retry after
		// the hang may run out of time too.
		hang bool
	}{
		// Retried to success.
		{name: "stream reset before headers", fault: "reset", stream: true, status: 200, attempts: 2},
		{name: "stream hang before headers", fault: "hang", stream: true, status: 200, attempts: 2, hang: true},
		{name: "stream 529 then 500", fault: "529,500", stream: true, status: 200, attempts: 3},
		{name: "502 then 503", fault: "502,503", status: 200, attempts: 3},
		{name: "504", fault: "504", status: 200, attempts: 2},
		// The budget spent.
		{name: "reset every time", fault: "reset,reset,reset", status: 502, attempts: 3, code: CodeUpstreamUnreachable},
		{name: "answer cut every time", fault: "reset-mid-stream,reset-mid-stream,reset-mid-stream", status: 502, attempts: 3, code: CodeUpstreamUnreachable},
		{name: "hang every time", fault: "hang,hang,hang", status: 504, attempts: 3, code: CodeUpstreamTimeout, hang: true},
		{name: "stream reset every time", fault: "reset,reset,reset", stream: true, status: 502, attempts: 3, code: CodeUpstreamUnreachable},
		{name: "529 every time", fault: "529,529,529", status: 529, attempts: 3},
		{name: "503 every time", fault: "503,503,503", status: 503, attempts: 3},
		{name: "connection refused", path: "/down", status: 502, attempts: 3, code: CodeUpstreamUnreachable},
	} {
		base := patient
		if tc.hang {
			base = impatient
		}
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
		attempts, err := strconv.Atoi(resp.Header.Get(HeaderAttempts))
		require.NoError(t, err, "%s: %s", tc.name, HeaderAttempts)
		seen := int(mock.Stats().ByRequestID[id])
		switch {
		case tc.path != "":
			assert.Equal(t, tc.attempts, attempts, tc.name)
		case tc.hang && tc.status == 200:
			assert.GreaterOrEqual(t, attempts, tc.attempts, "%s: the hang cost an attempt", tc.name)
			assert.LessOrEqual(t, seen, attempts, "%s: the provider saw no attempt Governor did not report", tc.name)
		case tc.hang:
			assert.Equal(t, tc.attempts, attempts, tc.name)
			assert.LessOrEqual(t, seen, attempts, "%s: the provider saw no attempt Governor did not report", tc.name)
		default:
			assert.Equal(t, tc.attempts, attempts, tc.name)
			assert.Equal(t, tc.attempts, seen, "%s: the provider saw each attempt once", tc.name)
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
	for _, base := range []string{patient, impatient} {
		for _, l := range lanesOf(t, c, base) {
			assert.Zero(t, l.InFlight, l.ID)
			assert.Zero(t, l.Queued, l.ID)
		}
		resp, body := chat(t, c, base, nil)
		assert.Equal(t, 200, resp.StatusCode, body)
		assert.Equal(t, "COMPLETED", resp.Header.Get(HeaderStatus))
	}
}
