package proxy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
)

// A lane whose limit allows more calls than its upstream has connections
// says so: its calls beyond MaxConnsPerUpstream wait for a connection, and
// /governor/lanes and governor_lane_conn_limited show it while they do.
func TestLaneLimitedByUpstreamConnectionsSaysSo(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := metrics.NewSet()
	cfg := fastRetries(Config{Upstream: mustURL(t, up), Metrics: set, MaxConnsPerUpstream: 2})
	cfg.AIMD = aimd.Config{Max: 8, Initial: 8}
	_, base := startProxy(t, cfg)
	c := client(t)

	sent := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { chat(t, c, base, map[string]string{"X-Request-Id": "block"}) })
	}
	<-rec.arrived
	<-rec.arrived
	require.Eventually(t, func() bool {
		lanes := lanesOf(t, c, base)
		return len(lanes) == 1 && lanes[0].InFlight == 4
	}, 10*time.Second, 5*time.Millisecond, "four calls let out by the lane")
	assert.Len(t, rec.seen(), 2, "two connections: two calls reach the provider")

	l := lanesOf(t, c, base)[0]
	assert.True(t, l.ConnLimited, "lane %+v", l)
	assert.Equal(t, 4, l.UpstreamInFlight)
	assert.Equal(t, 2, l.UpstreamMaxConns)
	assert.Positive(t, l.UpstreamConnectMs, "the quickest of the connections opened")
	// Both connections opened while the test ran: the figure is in
	// milliseconds, whatever the machine's speed.
	assert.LessOrEqual(t, l.UpstreamConnectMs, float64(time.Since(sent))/float64(time.Millisecond), "opened since the calls were sent")
	assert.Contains(t, promText(set), fmt.Sprintf(`governor_lane_conn_limited{lane=%q} 1`, l.ID))

	close(rec.release)
	wg.Wait()
	l = lanesOf(t, c, base)[0]
	assert.False(t, l.ConnLimited, "every call answered: lane %+v", l)
	assert.Equal(t, 0, l.UpstreamInFlight)
	assert.Len(t, rec.seen(), 4, "each call reached the provider once")
}

// A lane whose calls do not fill the upstream's connections is not
// limited by them.
func TestLaneUnderConnectionBoundIsNotConnLimited(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), Metrics: set, MaxConnsPerUpstream: 3}))
	c := client(t)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { chat(t, c, base, map[string]string{"X-Request-Id": "block"}) })
	}
	<-rec.arrived
	<-rec.arrived
	l := lanesOf(t, c, base)[0]
	assert.False(t, l.ConnLimited, "lane %+v", l)
	assert.Equal(t, 2, l.UpstreamInFlight)
	assert.Equal(t, 3, l.UpstreamMaxConns)
	assert.Contains(t, promText(set), fmt.Sprintf(`governor_lane_conn_limited{lane=%q} 0`, l.ID))
	close(rec.release)
	wg.Wait()
}
