package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The latency a lane's controller hears runs from the moment the call's
// request is handed to a connection: a call that waits for one of its
// upstream's MaxConnsPerUpstream connections while the provider answers
// another one slowly did not find the provider slow. The provider takes
// 10 s (on Governor's clock) over "block" while "waits" waits for the only
// connection, then answers "waits" at once: the lane's latency figures
// hold one 10 s answer and one instant one, while the route's histogram,
// dispatch to answer, still counts the wait.
//
// A call without a body (GET /v1/models) is timed the same way.
func TestWaitForAConnectionIsNotUpstreamLatency(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(t *testing.T, c *http.Client, base string, headers map[string]string)
	}{
		{"with a body", func(t *testing.T, c *http.Client, base string, h map[string]string) { chat(t, c, base, h) }},
		{"without a body", getModels},
	} {
		t.Run(tc.name, func(t *testing.T) { testWaitForAConnection(t, tc.call) })
	}
}

// getModels sends GET /v1/models, a call without a body, with headers.
func getModels(t *testing.T, c *http.Client, base string, headers map[string]string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/models", nil)
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func testWaitForAConnection(t *testing.T, call func(t *testing.T, c *http.Client, base string, headers map[string]string)) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := metrics.NewSet()
	clock := newManualClock()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), Metrics: set,
		MaxConnsPerUpstream: 1, AIMD: fixedLimit(2), Now: clock.Now}))
	c := client(t)
	// The provider holds its answer to waits until the test has seen the
	// lane observe block's.
	answerWaits := make(chan struct{})
	releaseWaits := sync.OnceFunc(func() { close(answerWaits) })
	t.Cleanup(releaseWaits)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Header.Get("X-Request-Id") == "waits" {
			<-answerWaits
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"`+r.Header.Get("X-Request-Id")+`"}`)
	}

	var wg sync.WaitGroup
	wg.Go(func() { call(t, c, base, map[string]string{"X-Request-Id": "block"}) })
	require.Equal(t, "block", <-rec.arrived)
	wg.Go(func() { call(t, c, base, map[string]string{"X-Request-Id": "waits"}) })
	hc := p.router.def.client
	require.Eventually(t, func() bool { return hc.PendingRequests() == 2 }, 10*time.Second, time.Millisecond,
		"both calls sent to the upstream, one of them waiting for its connection")
	clock.Advance(10 * time.Second)
	close(rec.release)
	// The controller hears block's 10 s before waits' answer: the figures
	// below are in that order, whichever call's observation the scheduler
	// would have run first.
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].LatencyEWMAMs > 0 }, 10*time.Second, time.Millisecond,
		"block's answer observed")
	releaseWaits()
	wg.Wait()
	require.Equal(t, []string{"block", "waits"}, rec.seen())

	l := lanesOf(t, c, base)[0]
	// Default alpha 0.2: 10 s, then 0.8 x 10 s + 0.2 x 0.
	assert.InDelta(t, 8000, l.LatencyEWMAMs, 1, "lane %+v", l)
	text := promText(set)
	assert.Equal(t, "10", sampleOf(text, fmt.Sprintf(`governor_lane_upstream_latency_seconds_sum{lane=%q}`, l.ID)),
		"the lane's histogram: the provider's 10 s over block, none over waits")
	assert.Equal(t, "20", sampleOf(text, `governor_upstream_latency_seconds_sum{route="default"}`),
		"the route's histogram: dispatch to answer, the wait for the connection included")
}

// sampleOf returns the value of series in the Prometheus text, or "".
func sampleOf(text, series string) string {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// An attempt that waits for a free connection to its upstream longer than
// the attempt timeout never reached the provider: it is a connection
// error, which the controller does not read as congestion, not a timeout,
// which would cut the lane as if the provider were slow. The call is told
// why it failed. (A stream holds the only connection: its attempt ended
// with its first byte.)
func TestConnectionWaitPastTheAttemptTimeoutIsNoTimeout(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Request-Id"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, srv.URL), Metrics: set,
		MaxConnsPerUpstream: 1, AttemptTimeout: time.Second, ConnectTimeout: time.Minute}))
	c := client(t)

	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-test","stream":true}`))
	require.NoError(t, err)
	stream, err := c.Do(req)
	require.NoError(t, err)
	resp, body := chat(t, c, base, map[string]string{"X-Governor-Max-Retries": "0"})
	close(release)
	_, err = io.Copy(io.Discard, stream.Body)
	require.NoError(t, err)
	stream.Body.Close()

	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, body)
	assert.Contains(t, body, "no connection", "the error says the call never reached a connection")
	mu.Lock()
	assert.Len(t, seen, 1, "the provider never saw the call that waited")
	mu.Unlock()
	l := lanesOf(t, c, base)[0]
	assert.Zero(t, l.Decreases, "the lane was not cut: %+v", l)
	text := promText(set)
	assert.Equal(t, "0", sampleOf(text, fmt.Sprintf(`governor_attempts_total{lane=%q,outcome="timeout"}`, l.ID)), "timeouts")
	assert.Equal(t, "1", sampleOf(text, fmt.Sprintf(`governor_attempts_total{lane=%q,outcome="connection_error"}`, l.ID)), "connection errors")
}
