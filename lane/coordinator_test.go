package lane

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/llmgovernor/governor/internal/logtest"
)

func TestCtrlInFlight(t *testing.T) {
	for _, tc := range []struct{ inFlight, share, synced, limit, want int }{
		{4, 4, 8, 8, 8},      // the whole share in use: the shared limit is in use
		{5, 4, 8, 8, 8},      // above it (after a cut)
		{2, 4, 8, 8, 4},      // half the share: half the limit
		{1, 4, 8, 8, 2},      //
		{3, 4, 4, 4, 3},      // never the whole limit when the share is not used
		{1, 0, 8, 8, 8},      // no share (an idle member): one call is all of it
		{1, 1, 1, 1, 1},      // limit 1
		{1, 3, 10, 10, 3},    // rounded down
		{4, 4, 8, 10, 8},     // grown since the sync: in use only up to the synced limit
		{4, 4, 8, 6, 6},      // cut since the sync: at most the limit
		{4, 4, 0, 8, 1},      // no sync yet
		{10, 10, 40, 44, 40}, // a decrease's level is what the shares gave out
	} {
		assert.Equal(t, tc.want, ctrlInFlight(tc.inFlight, tc.share, tc.synced, tc.limit), "%+v", tc)
	}
}

// A share that grows applies only once the others have synced since it was
// given; one that shrinks applies at once.
func TestGrownShareWaitsForTheOthers(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	grace := 150 * time.Millisecond
	c := &laneCoord{}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// g is a sync at ms when the others last synced a grace ago.
	g := func(s, ms, from int) int { return c.grownShare(s, at(ms), at(ms).Add(-grace), from) }

	assert.Equal(t, 1, g(8, 0, 1), "joining: the start's limit until the others have synced")
	assert.Equal(t, 1, g(8, 100, 1))
	assert.Equal(t, 8, g(8, 200, 1), "a grace later, the share")
	assert.Equal(t, 8, g(11, 300, 8), "a larger share waits")
	assert.Equal(t, 8, g(11, 400, 8))
	assert.Equal(t, 11, g(11, 500, 8), "then applies")
	assert.Equal(t, 7, g(7, 510, 11), "a smaller share applies at once")
	assert.Equal(t, 7, g(9, 600, 7), "the share of a grace ago bounds it")
	assert.Equal(t, 9, g(9, 800, 7))
	assert.LessOrEqual(t, len(c.shares), 3, "old syncs are dropped")

	// When the record says when the others last synced, a larger share
	// applies as soon as they all have since it was given.
	assert.Equal(t, 9, c.grownShare(12, at(900), at(850), 9), "given at 900: the others synced at 850 at the latest")
	assert.Equal(t, 9, c.grownShare(12, at(1000), at(880), 9), "one of them has not synced since 900")
	assert.Equal(t, 12, c.grownShare(12, at(1100), at(1010), 9), "all have: it applies, before a grace")
}

func TestPeakDemand(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	memory := 250 * time.Millisecond
	c := &laneCoord{}
	assert.Equal(t, 16, c.peakDemand(16, at(0), memory), "rises at once")
	assert.Equal(t, 16, c.peakDemand(15, at(100), memory), "a client between two calls is no demand gone")
	assert.Equal(t, 16, c.peakDemand(14, at(200), memory))
	assert.Equal(t, 15, c.peakDemand(14, at(300), memory), "two syncs later, it is")
	assert.Equal(t, 2, c.peakDemand(0, at(400), memory), "clients gone: all but two slots go at once")
	assert.Equal(t, 0, c.peakDemand(0, at(700), memory))
	assert.Len(t, c.demands, 1, "old syncs are dropped")
}

// A Redis that is lost and found again (a freeze, a restart, a slow
// command) is logged once by the Coordinator: each lane logs its first
// join at info level, and its falls back and rejoins at debug level only,
// or every blip would log two lines per lane (200 for 100 lanes).
func TestLaneTransitionsAreLoggedOnce(t *testing.T) {
	var buf logtest.Buffer
	c := newCoordLane(t, withLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	shared := func() Shared {
		return Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: c.clock.Now()}
	}
	c.sync(shared())
	for i := range 3 {
		c.clock.Set(ms(100 * (i + 1)))
		c.l.fallback()
		c.sync(shared())
	}
	assert.Len(t, buf.Lines(t, "lane coordinated"), 1, "the first join")
	assert.Empty(t, buf.Lines(t, "lane governed locally"), "falls back at debug level")
	assert.Equal(t, 8, c.l.q.Stats().Limit, "and rejoined")
}

// A coordinated lane books its dispatches on the bucket shared by every
// Governor at the rate and burst the sync gave, the provider's as learned:
// the count of every Governor's calls refills as the provider's bucket
// does. Without a shared rate, or with the Coordinator down, the local
// pacer decides and nothing is booked in it.
func TestSharedBucketIsBookedAtTheLearnedRate(t *testing.T) {
	c := newCoordLane(t)
	fc := c.r.cfg.Coordinator.(*fakeCoordinator)
	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: c.clock.Now()})
	c.l.Reserve(t.Context(), c.clock.Now())
	assert.Zero(t, fc.reserves, "no shared rate: the local pacer decides")

	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, Rate: 33, Burst: 33, OthersSynced: c.clock.Now()})
	c.l.Reserve(t.Context(), c.clock.Now())
	assert.Equal(t, 1, fc.reserves)
	assert.Equal(t, 33.0, fc.rate, "the learned rate")
	assert.Equal(t, 33.0, fc.burst)

	fc.mu.Lock()
	fc.down = true
	fc.mu.Unlock()
	c.l.Reserve(t.Context(), c.clock.Now())
	assert.Equal(t, 1, fc.reserves, "the Coordinator down: the local pacer decides")
}

// A coordinated lane publishes its pacer's rate for the shared bucket only
// while a report bounds the provider's rate from below: the Governors'
// bucket refills at the largest rate published, and a rate known only
// from above (a bucket nearly full: one refill in a report's reset, or
// two) can be twice the provider's.
func TestPublishedRateIsALowerBound(t *testing.T) {
	var p pacer
	seq, _ := p.reserve(t0)
	// 9 of 10 left, full in 100 ms: at most 10 a second, at least none.
	p.observe(Budget{Limit: 10, Remaining: 9, Reset: 100 * time.Millisecond}, seq, t0, t0)
	rate, _ := p.learned(t0)
	assert.Zero(t, rate, "known only from above: nothing published")
	assert.NotNil(t, p.info(t0), "the lane paces by it all the same")

	seq, _ = p.reserve(ms(100))
	// 5 of 10 left, full in 500 ms: between 8 and 10 a second.
	p.observe(Budget{Limit: 10, Remaining: 5, Reset: 500 * time.Millisecond}, seq, ms(100), ms(200))
	rate, capacity := p.learned(ms(200))
	assert.Equal(t, 8.0, rate, "the lower bound")
	assert.Equal(t, 10.0, capacity)

	rate, _ = p.learned(ms(200).Add(rateMemory))
	assert.Zero(t, rate, "no report has bounded it for the pacer's memory")
}
