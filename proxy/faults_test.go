package proxy

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/rawupstream"
	"github.com/llmgovernor/governor/mockllm"
)

// Each upstream fault ends with an answer within the configured timeouts:
// a retry that succeeds, or a Governor error that says why.
//
// A hang ends by the attempt timeout; on a loaded machine an attempt
// around it may run out of time too, before the provider has seen it (see
// TestUpstreamFaultMatrix). So the hang goes through a Governor with a
// short attempt timeout, where the provider must see no more attempts than
// Governor reports, and the other faults through one whose attempts only
// the provider ends, where it must see each attempt once.
func TestUpstreamFaultsAreRetriedToSuccess(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Latency: 5 * time.Millisecond})
	_, patient := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: time.Minute}))
	_, impatient := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), AttemptTimeout: 300 * time.Millisecond}))
	c := client(t)
	for _, tc := range []struct {
		fault    string
		attempts int
	}{
		{"reset", 2},
		{"reset-mid-stream", 2}, // a JSON answer cut half way
		{"hang", 2},             // until the attempt timeout
		{"500,502,503,529", 5},
		{"503,503", 3},
	} {
		hang := tc.fault == "hang"
		base := patient
		if hang {
			base = impatient
		}
		id := "fault-" + tc.fault
		resp, body := chat(t, c, base, map[string]string{"X-Request-Id": id, "X-Mock-Fault": tc.fault})
		assert.Equal(t, 200, resp.StatusCode, "%s: %s", tc.fault, body)
		assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus), tc.fault)
		assert.Contains(t, body, "Simulated answer", tc.fault)
		attempts, err := strconv.Atoi(resp.Header.Get(HeaderAttempts))
		require.NoError(t, err, tc.fault)
		seen := int(mock.Stats().ByRequestID[id])
		if hang {
			assert.GreaterOrEqual(t, attempts, tc.attempts, "%s: the hang cost an attempt", tc.fault)
			assert.LessOrEqual(t, seen, attempts, "%s: the provider saw no attempt Governor did not report", tc.fault)
			continue
		}
		assert.Equal(t, tc.attempts, attempts, tc.fault)
		assert.Equal(t, tc.attempts, seen, "%s: the provider saw each attempt once", tc.fault)
	}
	for _, base := range []string{patient, impatient} {
		resp, err := c.Get(base + "/governor/lanes")
		require.NoError(t, err, "Governor stays healthy")
		resp.Body.Close()
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestStreamFaultsCutTheStreamVisibly(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{ChunkDelay: 5 * time.Millisecond, StreamChunks: 20})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), StreamIdleTimeout: 300 * time.Millisecond}))
	c := client(t)
	for _, fault := range []string{"reset-mid-stream", "hang-mid-stream"} {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Mock-Fault", fault)
		resp, err := c.Do(req)
		require.NoError(t, err, fault)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Error(t, err, "%s: a cut stream must not end cleanly", fault)
		assert.Contains(t, string(body), "data: {", "%s: the events before the fault arrived", fault)
		assert.NotContains(t, string(body), "[DONE]", fault)
		assert.Equal(t, "1", resp.Header.Get(HeaderAttempts), "%s: no retry after the first byte", fault)
	}
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 0 }, 5*time.Second, 10*time.Millisecond)
}

func TestSlowTrickleStreamCompletes(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, b := range []byte("data: slow\n\ndata: [DONE]\n\n") {
			w.Write([]byte{b})
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond) // the trickle itself
		}
	}))
	defer up.Close()
	// The stream takes over 100 ms, twice the attempt timeout. (The idle
	// timeout is not what this test is about: a short one would cut the
	// stream of a machine that stalls.)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: time.Minute,
		AttemptTimeout: 50 * time.Millisecond}))
	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "data: slow\n\ndata: [DONE]\n\n", string(body), "a stream slower than the attempt timeout but never idle completes")
}

func TestMalformedAnswerAndTLSFailureGiveGovernorErrors(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	// An upstream that answers garbage.
	garbage := rawupstream.Start(t, func(c *net.TCPConn, _ string, _ int) {
		io.WriteString(c, "THIS IS NOT HTTP\r\n\r\n")
	})
	// A plain HTTP server addressed as https: the TLS handshake fails.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer plain.Close()

	_, base := startProxy(t, fastRetries(Config{
		Upstream:   mustURL(t, "http://"+garbage),
		Routes:     []Route{{Name: "tls", URL: mustURL(t, strings.Replace(plain.URL, "http://", "https://", 1))}},
		TLSConfig:  &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test server has no certificate at all
		MaxRetries: 2,
	}))
	c := client(t)
	for _, path := range []string{"/v1/chat/completions", "/tls/v1/chat/completions"} {
		start := time.Now()
		resp, err := c.Post(base+path, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err, path)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 502, resp.StatusCode, "%s: %s", path, body)
		assert.Contains(t, string(body), "governor_error", path)
		assert.Equal(t, "3", resp.Header.Get(HeaderAttempts), path)
		assert.Less(t, time.Since(start), 5*time.Second, path)
	}
}
