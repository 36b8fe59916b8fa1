package aimd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inUse is a success answered at now after latency lat, with the lane at
// its limit.
func inUse(c *Controller, lat float64) Sample { return ok(lat, c.Limit()) }

func TestDefaultSlowStart(t *testing.T) {
	c := New(Config{Max: 64, Initial: 4}, t0)
	for i, want := range []int{5, 6, 7, 8} {
		ev := c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i)))
		assert.Equal(t, Increased, ev, "success %d", i)
		assert.Equal(t, want, c.Limit(), "success %d: +1 per success", i)
	}
}

func TestDefaultInitial(t *testing.T) {
	assert.Equal(t, 8, New(Config{Max: 64}, t0).Limit(), "min(Max, 8)")
	assert.Equal(t, 3, New(Config{Max: 3}, t0).Limit(), "min(Max, 8)")
}

func TestDefaultDecreaseOncePerRoundTrip(t *testing.T) {
	c := New(Config{Max: 64, Initial: 20}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	st := c.State()
	assert.InDelta(t, 18, st.Target, 1e-9, "20 × 0.9")
	assert.InDelta(t, 20, st.DecreaseLevel, 1e-9)
	assert.Equal(t, at(10), st.LastDecrease)

	// A burst of 429s from calls dispatched before the decrease (at 9.5s)
	// is explained by it.
	for i := range 10 {
		assert.Equal(t, None, c.ObserveAt(limited(1, 19), at(10.5)), "old 429 %d", i)
		assert.Equal(t, None, c.ObserveAt(timedOut(30), at(10.5)), "old timeout %d", i)
	}
	// So is a success dispatched before it: no growth from it.
	assert.Equal(t, None, c.ObserveAt(ok(1, 18), at(10.6)))
	st = c.State()
	assert.InDelta(t, 18, st.Target, 1e-9)
	assert.Equal(t, uint64(1), st.Decreases)

	// A 429 from a call sent after the decrease, before any such call
	// succeeded: the cut was not enough, halve.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.5, 18), at(11)))
	st = c.State()
	assert.InDelta(t, 9, st.Target, 1e-9, "18 × 0.5")
	assert.Equal(t, uint64(2), st.Decreases)
	assert.False(t, st.Collapsed, "a success came in between: not a storm")
}

func TestDefaultConfirmedDecreaseIsGentle(t *testing.T) {
	c := New(Config{Max: 64, Initial: 20}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	// A call sent after the decrease succeeds: the new level works, and the
	// target slow-starts back to just below the level that failed.
	assert.Equal(t, Increased, c.ObserveAt(ok(1, 18), at(11.5)))
	assert.InDelta(t, 19, c.State().Target, 1e-9, "min(18+1, 20-1)")
	// The next fresh congestion signal is a new overshoot: gentle again.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 19), at(12)))
	assert.InDelta(t, 17.1, c.State().Target, 1e-9, "19 × 0.9")
}

func TestDefaultStormCollapsesAndRecovers(t *testing.T) {
	c := New(Config{Max: 64, Initial: 20}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	assert.Equal(t, None, c.ObserveAt(limited(1, 19), at(10.2)), "explained by the decrease")
	// Sent after the decrease, rate limited again, nothing succeeded in
	// between: a storm.
	require.Equal(t, Collapsed, c.ObserveAt(limited(0.001, 18), at(11)))
	st := c.State()
	assert.Equal(t, 1, st.Limit)
	assert.True(t, st.Collapsed)
	assert.Equal(t, uint64(1), st.Collapses)
	assert.InDelta(t, 20, st.DecreaseLevel, 1e-9, "the pre-storm level")
	assert.Equal(t, None, c.ObserveAt(limited(2, 18), at(11.5)), "sent before the collapse")

	// Slow start back to half the pre-storm level: 1 → 10 in 9 successes.
	for i := range 8 {
		assert.Equal(t, Increased, c.ObserveAt(inUse(c, 0.5), at(12+0.01*float64(i))), "success %d", i)
	}
	assert.Equal(t, Recovered, c.ObserveAt(inUse(c, 0.5), at(12.5)))
	st = c.State()
	assert.Equal(t, 10, st.Limit)
	assert.False(t, st.Collapsed)
}

func TestDefaultNoStormWhenSpreadOut(t *testing.T) {
	c := New(Config{Max: 64, Initial: 20}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	// The next fresh 429 comes 16s later: outside the collapse window.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.5, 18), at(26)))
	st := c.State()
	assert.False(t, st.Collapsed)
	assert.InDelta(t, 9, st.Target, 1e-9, "unconfirmed: 18 × 0.5")
}

func TestDefaultNoGrowthWhenNotInUse(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	for i := range 100 {
		assert.Equal(t, None, c.ObserveAt(ok(1, 3), at(1+float64(i))), "success %d with 3 of 8 in flight", i)
	}
	assert.InDelta(t, 8, c.State().Target, 1e-9)
	assert.Equal(t, Increased, c.ObserveAt(ok(1, 8), at(200)), "at the limit")
	assert.Equal(t, 9, c.Limit())
	assert.Equal(t, Increased, c.ObserveAt(ok(1, 0), at(201)), "InFlight 0: unknown, counts as in use")
}

func TestDefaultNoWindUpAboveMax(t *testing.T) {
	c := New(Config{Max: 10}, t0)
	for i := range 1000 {
		c.ObserveAt(inUse(c, 1), at(1+0.1*float64(i)))
		require.LessOrEqual(t, c.State().Target, 10.0, "success %d", i)
	}
	assert.InDelta(t, 10, c.State().Target, 1e-9)
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(1000)))
	assert.Equal(t, 9, c.Limit(), "10 × 0.9: the decrease bites at once")
}

func TestDefaultFailureChangesNothing(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	before := c.State()
	for i := range 50 {
		assert.Equal(t, None, c.ObserveAt(failed(0.1), at(1+float64(i))), "failure %d", i)
	}
	assert.Equal(t, before, c.State())
}

// feedRound feeds one round trip of in-use successes, answered from sec
// on, dispatched one second earlier, and returns the events.
func feedRound(c *Controller, sec float64, n int) []Event {
	var evs []Event
	for i := range n {
		evs = append(evs, c.ObserveAt(inUse(c, 1), at(sec+0.001*float64(i))))
	}
	return evs
}

func TestDefaultHoldThenProbe(t *testing.T) {
	c := New(Config{Max: 64, Initial: 17}, t0)
	// One probe too many at 17: 429 at once.
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(100)))
	require.Equal(t, 15, c.Limit(), "17 × 0.9 = 15.3")
	// The first fresh success confirms, and slow start returns to 16.
	require.Equal(t, Increased, c.ObserveAt(ok(1, 16), at(101.5)))
	require.Equal(t, 16, c.Limit())

	// Round trips 0..2 (the current one and ProbeHold-1 more): hold at 16.
	for r := range 3 {
		feedRound(c, 102+float64(r), 16)
		assert.Equal(t, 16, c.Limit(), "round trip %d: holding below the level that failed", r)
	}
	// Then probe: +IncreaseStep/target per success, about +1 over the next
	// round trip (16 successes add 0.97, the 17th crosses 17).
	feedRound(c, 105, 16)
	assert.Equal(t, 16, c.Limit(), "probing: 16 successes")
	assert.InDelta(t, 17, c.State().Target, 0.05)
	assert.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(105.5)))
	assert.Equal(t, 17, c.Limit(), "probing")
	// The probe fails: a gentle decrease again.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(105.5)))
	assert.Equal(t, 15, c.Limit())
}

func TestDefaultCapacityGrowthRestartsSlowStart(t *testing.T) {
	c := New(Config{Max: 64, Initial: 17}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(100)))
	require.Equal(t, Increased, c.ObserveAt(ok(1, 16), at(101.5)))
	for r := range 4 {
		feedRound(c, 102+float64(r), c.Limit()+1)
	}
	require.Equal(t, 17, c.Limit(), "probing reached the level that failed")
	feedRound(c, 106, c.Limit()) // a round trip at 17 starts, no 429
	assert.InDelta(t, 17, c.State().DecreaseLevel, 1e-9)
	// ... and completes: capacity grew. The old level is forgotten and
	// slow start resumes: +1 for each of the other 16 successes.
	feedRound(c, 107, c.Limit())
	assert.Zero(t, c.State().DecreaseLevel, "the old level is forgotten")
	assert.GreaterOrEqual(t, c.Limit(), 32, "slow start")
}

func TestDefaultRepeatDecreaseProbesAtOnce(t *testing.T) {
	c := New(Config{Max: 64, Initial: 32}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 32), at(10)))
	c.ObserveAt(ok(2, 32), at(10.1)) // an old call: breaks the storm streak only
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 28), at(10.2)))
	require.Equal(t, 14, c.Limit(), "28.8 × 0.5")
	c.ObserveAt(inUse(c, 1), at(11.3)) // confirms; the probe clock starts
	feedRound(c, 12.3, 14)
	assert.Equal(t, 15, c.Limit(), "no hold after a repeat decrease")
}
