package aimd

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inUse is a success answered at now after latency lat, with the lane at
// its limit.
func inUse(c *Controller, lat float64) Sample { return ok(lat, c.Limit()) }

func TestDefaultSlowStart(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 4}, t0)
	// No level remembered yet: +2 per success, tripling every round trip.
	for i, want := range []int{6, 8, 10, 12} {
		ev := c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i)))
		assert.Equal(t, Increased, ev, "success %d", i)
		assert.Equal(t, want, c.Limit(), "success %d: +2 per success", i)
	}
	// Toward a remembered level, +1 per success (doubling).
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 12), at(2)))
	require.InDelta(t, 10.5, c.State().Target, 1e-9, "12 × 0.9 = 10.8, and, above Initial, one slot below the 11 held")
	c = New(Config{AdmissionWindow: -1, Max: 64, Initial: 20}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(2)))
	for i, want := range []float64{19, 19} {
		c.ObserveAt(ok(0.5, c.Limit()), at(3+0.01*float64(i)))
		assert.InDelta(t, want, c.State().Target, 1e-9, "success %d after a decrease at 20: +1 up to 20-1", i)
	}
}

func TestDefaultInitial(t *testing.T) {
	assert.Equal(t, 8, New(Config{AdmissionWindow: -1, Max: 64}, t0).Limit(), "min(Max, 8)")
	assert.Equal(t, 3, New(Config{AdmissionWindow: -1, Max: 3}, t0).Limit(), "min(Max, 8)")
}

// from20 returns a controller that slow-started from 8 to 20: above the
// level it started at, where an unconfirmed cut is not a squeeze.
func from20(t *testing.T) *Controller {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	warmAt(t, c, 0.05, 0.05)
	for i := range 6 {
		c.ObserveAt(inUse(c, 0.05), at(0.1+0.01*float64(i)))
	}
	require.InDelta(t, 20, c.State().Target, 1e-9, "8 + 6 × 2")
	return c
}

func TestDefaultDecreaseOncePerRoundTrip(t *testing.T) {
	c := from20(t)
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
	// succeeded (but older calls did): the cut was not enough, or others
	// took what it freed. Cut by 0.9².
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.5, 18), at(11)))
	st = c.State()
	assert.InDelta(t, 14.58, st.Target, 1e-9, "18 × 0.81")
	assert.Equal(t, uint64(2), st.Decreases)
	assert.False(t, st.Collapsed, "a success came in between: not a storm")
}

// Which limit a call was sent under is read from Sample.Dispatched when
// the caller knows it: a call granted its slot before a decrease, whose
// attempt started just after it (its goroutine woke late), is not a sign
// that the cut was not enough.
func TestDefaultDispatchedIsWhenTheSlotWasGranted(t *testing.T) {
	late := func() Sample { // started 0.7 ms after the decrease at 10s, answered 429 at once
		return Sample{Outcome: RateLimited, Latency: secs(0.0001), InFlight: 18}
	}
	c := from20(t)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	require.InDelta(t, 18, c.State().Target, 1e-9)
	s := late()
	s.Dispatched = at(9.9999) // granted before the decrease
	assert.Equal(t, None, c.ObserveAt(s, at(10.0008)), "sent under the limit before the cut: explained by it")
	assert.InDelta(t, 18, c.State().Target, 1e-9)

	// Without Dispatched, now-Latency is all there is: the same 429 looks
	// sent after the cut, before any such call succeeded, and cuts again.
	c = from20(t)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	assert.Equal(t, Decreased, c.ObserveAt(late(), at(10.0008)))
	assert.InDelta(t, 14.58, c.State().Target, 1e-9, "18 × 0.81")

	// A call granted after the decrease is fresh, however its latency
	// reads.
	c = from20(t)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	s = limited(5, 18) // now-Latency is before the decrease
	s.Dispatched = at(10.0001)
	assert.Equal(t, Decreased, c.ObserveAt(s, at(10.0008)))
	assert.InDelta(t, 14.58, c.State().Target, 1e-9, "18 × 0.81")
}

func TestDefaultConfirmedDecreaseIsGentle(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 20}, t0)
	warm(t, c)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	// A call sent after the decrease succeeds: the new level works, and the
	// target slow-starts back to just below the level that failed.
	assert.Equal(t, Increased, c.ObserveAt(ok(0.4, 18), at(11.5)))
	assert.InDelta(t, 19, c.State().Target, 1e-9, "min(18+1, 20-1)")
	// The next fresh congestion signal is a new overshoot: gentle again.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 19), at(12)))
	assert.InDelta(t, 17.1, c.State().Target, 1e-9, "19 × 0.9")
}

// warm feeds Initial successes of 0.4s, answered from 0.5s on, that do
// not grow the target (the lane uses less than its limit): the lane is no
// longer a newcomer, which the usual cuts and the storm rule require.
func warm(t *testing.T, c *Controller) { warmAt(t, c, 0.4, 0.5) }

// warmAt is warm with successes of lat seconds answered from sec on.
func warmAt(t *testing.T, c *Controller, lat, sec float64) {
	for i := range int(c.Config().Initial) {
		require.Equal(t, None, c.ObserveAt(ok(lat, 1), at(sec+0.001*float64(i))), "warm-up success %d", i)
	}
}

func TestDefaultStormCollapsesAndRecovers(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 20}, t0)
	warm(t, c)
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

func TestDefaultRepeatDecreaseBelowCollapseThreshold(t *testing.T) {
	// With CollapseThreshold 3, a second decrease with nothing at all
	// answered in between halves; the third collapses.
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 20, CollapseThreshold: 3}, t0)
	warm(t, c)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 18), at(10.5)))
	assert.InDelta(t, 9, c.State().Target, 1e-9, "18 × 0.5")
	assert.Equal(t, Collapsed, c.ObserveAt(limited(0.001, 9), at(11)))
}

func TestDefaultNoStormWhenSpreadOut(t *testing.T) {
	c := from20(t)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	// The next fresh 429 comes 16s later: outside the collapse window.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.5, 18), at(26)))
	st := c.State()
	assert.False(t, st.Collapsed)
	assert.InDelta(t, 14.58, st.Target, 1e-9, "unconfirmed: 18 × 0.81")
}

func TestDefaultNoGrowthWhenNotInUse(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	// All within one round trip, so that the lane does not yield.
	for i := range 100 {
		assert.Equal(t, None, c.ObserveAt(ok(1, 3), at(1+0.001*float64(i))), "success %d with 3 of 8 in flight", i)
	}
	assert.InDelta(t, 8, c.State().Target, 1e-9)
	assert.Equal(t, Increased, c.ObserveAt(ok(1, 8), at(200)), "at the limit")
	assert.Equal(t, 10, c.Limit())
	assert.Equal(t, Increased, c.ObserveAt(ok(1, 0), at(201)), "InFlight 0: unknown, counts as in use")
}

// A lane whose caller held calls in their slots for a provider's budget
// while a call was out (Sample.Held) is held back by the budget, not by its
// limit: the answer does not grow the limit, in slow start or above it,
// however many calls are in flight; it still clocks the yields.
func TestDefaultNoGrowthWhileCallsAreHeld(t *testing.T) {
	held := func(c *Controller, lat float64) Sample {
		s := inUse(c, lat)
		s.Held = true
		return s
	}
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	for i := range 100 {
		assert.Equal(t, None, c.ObserveAt(held(c, 1), at(1+0.001*float64(i))), "held success %d in slow start", i)
	}
	assert.InDelta(t, 8, c.State().Target, 1e-9, "slow start stopped")
	assert.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(2)), "none held: the limit holds the lane back")
	assert.Equal(t, 10, c.Limit())

	// Nor, after a decrease, does it slow start back or probe (the
	// yields that the round trips clock may lower it).
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(3)))
	level := c.State().Target
	for i := range 50 {
		ev := c.ObserveAt(held(c, 0.5), at(4+0.5*float64(i)))
		require.NotEqual(t, Increased, ev, "held round trip %d after a decrease", i)
		require.LessOrEqual(t, c.State().Target, level, "held round trip %d after a decrease", i)
	}

	// The yields still come: they bring a limit that grew before the
	// budget bound down toward the calls the budget lets out.
	c = New(Config{AdmissionWindow: -1, Max: 64, Initial: 10}, t0)
	for r := 1; r < yieldRounds; r++ {
		assert.Equal(t, None, c.ObserveAt(held(c, 1), at(float64(r))), "round trip %d", r)
	}
	require.Equal(t, Yielded, c.ObserveAt(held(c, 1), at(yieldRounds)))
	assert.InDelta(t, 7, c.State().Target, 1e-9, "10 × 0.7")
}

func TestDefaultNoWindUpAboveMax(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 10}, t0)
	for i := range 1000 {
		c.ObserveAt(inUse(c, 1), at(1+0.1*float64(i)))
		require.LessOrEqual(t, c.State().Target, 10.0, "success %d", i)
	}
	assert.InDelta(t, 10, c.State().Target, 1e-9)
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(1000)))
	assert.Equal(t, 8, c.Limit(), "10 × 0.9 = 9, and, above Initial, one slot below the 9 held: the decrease bites at once")
}

// TestDefaultAboveInitialGivesBack: after a confirmed 429, a lane holding
// more than Initial gives a slot back (two when the last one it gave back
// was taken), where a cut of 10% would round back to what it held; a lane
// at or below Initial keeps what it holds.
func TestDefaultAboveInitialGivesBack(t *testing.T) {
	// up slow-starts a lane from 8 (Initial) by +2 per in-use success.
	up := func(to int) *Controller {
		c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
		warmAt(t, c, 0.5, 0.5)
		for i := 0; c.Limit() < to; i++ {
			require.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i))))
		}
		require.Equal(t, to, c.Limit())
		return c
	}

	c := up(10)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 9), at(2)), "8 held and one more")
	assert.Equal(t, 9, c.Limit(), "at Initial: 10 × 0.9, what it holds with the call that failed")

	c = up(10)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(2)), "9 held and one more")
	assert.Equal(t, 8, c.Limit(), "above Initial: 9 held, one given back (10 × 0.9 would keep 9)")

	c = up(14)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 14), at(2)))
	assert.Equal(t, 12, c.Limit(), "13 held, one given back")
	require.Equal(t, Increased, c.ObserveAt(ok(0.5, 12), at(3)), "a call sent after the cut: slow start back toward 13")
	require.Equal(t, 13, c.Limit())
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 13), at(4)), "the ceiling came down to 13: the slot was taken")
	assert.Equal(t, 10, c.Limit(), "12 held, two given back")
	assert.InDelta(t, 10.5, c.State().Target, 1e-9)

	// Alone above 20, where the cut frees a slot anyway, nothing changes:
	// 33 × 0.9 is below 33 - 2.
	c = up(34)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 33), at(2)))
	assert.Equal(t, 31, c.Limit(), "max(34 × 0.9, 33 - 2), one below the 32 held")
}

func TestDefaultFailureChangesNothing(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
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
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 17}, t0)
	// One probe too many at 17: 429 at once.
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(100)))
	require.Equal(t, 15, c.Limit(), "17 × 0.9 = 15.3")
	// The first fresh success confirms, and slow start returns to 16.
	require.Equal(t, Increased, c.ObserveAt(ok(1, 16), at(101.5)))
	require.Equal(t, 16, c.Limit())

	// Round trips 0..3 (the current one and 3 more): at a limit of 16
	// the hold is min(ProbeHold, 1+16/3) = 4 round trips.
	for r := range 4 {
		feedRound(c, 102+float64(r), 16)
		assert.Equal(t, 16, c.Limit(), "round trip %d: holding below the level that failed", r)
	}
	// Then probe: +IncreaseStep/target per success, about +1 over the next
	// round trip (16 successes add 0.97, the 17th crosses 17).
	feedRound(c, 106, 16)
	assert.Equal(t, 16, c.Limit(), "probing: 16 successes")
	assert.InDelta(t, 17, c.State().Target, 0.05)
	assert.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(106.5)))
	assert.Equal(t, 17, c.Limit(), "probing")
	// The probe fails: a gentle decrease again.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(106.5)))
	assert.Equal(t, 15, c.Limit())

	// The second decrease at 17: a ceiling that stays put. The hold is the
	// same, but the probe then asks for the one more call at once.
	require.Equal(t, Increased, c.ObserveAt(ok(1, 16), at(108)))
	require.Equal(t, 16, c.Limit())
	for r := range 4 {
		feedRound(c, 109+float64(r), 16)
		assert.Equal(t, 16, c.Limit(), "round trip %d: holding", r)
	}
	assert.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(113)), "the first success of the probing round trip")
	assert.Equal(t, 17, c.Limit(), "one more call at once")
	assert.InDelta(t, 17, c.State().Target, 1e-9)
}

func TestDefaultCapacityGrowthRestartsSlowStart(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 17}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 17), at(100)))
	require.Equal(t, Increased, c.ObserveAt(ok(1, 16), at(101.5)))
	for r := range 5 {
		feedRound(c, 102+float64(r), c.Limit()+1)
	}
	require.Equal(t, 17, c.Limit(), "probing reached the level that failed")
	// The limit reached 17 at 106.016 (the 17th success of that round).
	// A call sent before that proves nothing about 17, nor does one
	// answered with fewer than 17 in flight.
	assert.Equal(t, None, c.ObserveAt(ok(1, 17), at(106.9)), "sent at 105.9")
	assert.Equal(t, None, c.ObserveAt(ok(0.4, 16), at(106.95)), "16 in flight")
	assert.InDelta(t, 17, c.State().DecreaseLevel, 1e-9)
	// A call sent after it, answered with 17 in flight: the provider takes
	// 17 now. Capacity grew: the old level is forgotten and slow start
	// resumes at once, +1 per success.
	before := c.State().Target
	assert.Equal(t, Increased, c.ObserveAt(ok(0.5, 17), at(107)))
	assert.Zero(t, c.State().DecreaseLevel, "the old level is forgotten")
	assert.InDelta(t, before+2, c.State().Target, 1e-9, "slow start with no level remembered: +2")
	feedRound(c, 108, c.Limit())
	assert.GreaterOrEqual(t, c.Limit(), 32, "slow start")
}

func TestDefaultRepeatDecreaseProbesAtOnce(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	for i := range 12 { // slow start from 8 to 32
		c.ObserveAt(inUse(c, 0.05), at(0.1+0.01*float64(i)))
	}
	require.Equal(t, 32, c.Limit())
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 32), at(10)))
	c.ObserveAt(ok(2, 32), at(10.1)) // an old call: breaks the storm streak only
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 28), at(10.2)))
	require.Equal(t, 24, c.Limit(), "30 × 0.81 (the first cut: max(32 × 0.9, 32-2))")
	c.ObserveAt(inUse(c, 1), at(11.3)) // confirms; the probe clock starts
	feedRound(c, 12.3, 25)
	assert.Equal(t, 25, c.Limit(), "no hold after an unconfirmed decrease")
}

func TestDefaultSqueezed(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0) // starts at 8
	warm(t, c)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 8), at(10)))
	require.InDelta(t, 7.2, c.State().Target, 1e-9, "max(8 × 0.9, 8-2)")
	assert.Equal(t, None, c.ObserveAt(ok(1, 7), at(10.3)), "an old call: breaks the storm streak only")
	// A 429 for a call sent after the cut, before any such call
	// succeeded, at or below the starting level: others took what the cut
	// freed. Nothing changes, not even the round trip.
	for i, sec := range []float64{10.5, 11, 11.5} {
		assert.Equal(t, None, c.ObserveAt(limited(0.001, 7), at(sec)), "squeezed 429 %d", i)
		st := c.State()
		assert.InDelta(t, 7.2, st.Target, 1e-9, "squeezed 429 %d", i)
		assert.Equal(t, at(10), st.LastDecrease, "squeezed 429 %d", i)
		assert.Equal(t, uint64(1), st.Decreases, "squeezed 429 %d", i)
		c.ObserveAt(ok(2, 7), at(sec+0.1)) // older calls still succeed
	}
	// A confirmed cut still goes lower.
	require.Equal(t, None, c.ObserveAt(ok(0.4, 6), at(12)), "sent at 11.6: confirms")
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 7), at(12.5)))
	assert.InDelta(t, 6.48, c.State().Target, 1e-9, "7.2 × 0.9")
	// So does an unconfirmed timeout: overload, not a squeeze.
	c.ObserveAt(ok(1, 6), at(12.6))
	assert.Equal(t, Decreased, c.ObserveAt(timedOut(0.4), at(13)))
	assert.InDelta(t, 6.48*0.81, c.State().Target, 1e-9, "× 0.81")
}

func TestDefaultFirstCut(t *testing.T) {
	// A fresh signal after a confirmed level: target × DecreaseRatio, but
	// a 429 frees at most overshootSlack (2) slots below its level.
	for _, tc := range []struct {
		name    string
		initial float64
		s       Sample
		want    float64
	}{
		{"429 at 33: 33-2 beats 33 × 0.9", 33, limited(0.001, 33), 31},
		{"429 at 20: equal", 20, limited(0.001, 20), 18},
		{"429 at 17: 17 × 0.9", 17, limited(0.001, 17), 15.3},
		{"429 at 8: 8 × 0.9", 8, limited(0.001, 8), 7.2},
		{"429 with 20 of 33 in flight: level 20", 33, limited(0.001, 20), 29.7},
		{"timeout at 33: always × 0.9", 33, timedOut(30), 29.7},
	} {
		c := New(Config{AdmissionWindow: -1, Max: 64, Initial: tc.initial}, t0)
		warm(t, c)
		require.Equal(t, Decreased, c.ObserveAt(tc.s, at(40)), tc.name)
		assert.InDelta(t, tc.want, c.State().Target, 1e-9, tc.name)
	}
}

func TestDefaultNewcomerNeverCollapses(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0) // starts at 8 (Initial); nothing answered yet
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 8), at(1)))
	assert.InDelta(t, 7.2, c.State().Target, 1e-9, "8 × 0.9")
	// Fresh 429s, nothing ever answered: others hold the capacity. No
	// collapse, no further cut, nothing changes.
	for i, sec := range []float64{2, 3, 4} {
		assert.Equal(t, None, c.ObserveAt(limited(0.001, 7), at(sec)), "429 %d before any success", i)
		st := c.State()
		assert.InDelta(t, 7.2, st.Target, 1e-9, "429 %d", i)
		assert.False(t, st.Collapsed, "429 %d", i)
		assert.Equal(t, at(1), st.LastDecrease, "429 %d", i)
	}
	assert.Equal(t, uint64(1), c.State().Decreases)
	// Its first calls get in one at a time, with 429s in between: until
	// Initial (8) have succeeded, those 429s change nothing either.
	for i := range 7 {
		sec := 4.5 + float64(i)
		assert.Equal(t, None, c.ObserveAt(ok(0.4, 2), at(sec)), "success %d", i+1)
		assert.Equal(t, None, c.ObserveAt(limited(0.001, 7), at(sec+0.5)), "429 after %d successes", i+1)
		assert.InDelta(t, 7.2, c.State().Target, 1e-9, "429 after %d successes", i+1)
	}
	assert.False(t, c.State().Collapsed)
	// Once Initial calls have got through, the usual rules apply: a
	// confirmed level, a gentle cut, then a storm collapses.
	assert.Equal(t, None, c.ObserveAt(ok(0.4, 7), at(12)), "the 8th success: fresh, at ss, holding")
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 7), at(12.5)))
	assert.InDelta(t, 6.48, c.State().Target, 1e-9, "7.2 × 0.9")
	assert.Equal(t, Collapsed, c.ObserveAt(limited(0.001, 6), at(13)))
	assert.Equal(t, 1, c.Limit())

	// Timeouts say nothing of others holding the capacity: a newcomer's
	// timeouts with nothing answered are a storm.
	c = New(Config{AdmissionWindow: -1, Max: 64}, t0)
	require.Equal(t, Decreased, c.ObserveAt(timedOut(0.5), at(1)))
	assert.Equal(t, Collapsed, c.ObserveAt(timedOut(0.5), at(2)))
}

func TestDefaultYield(t *testing.T) {
	// A lane with 6 calls in flight under a limit of 10 (its clients'
	// demand): it never sees congestion and never grows.
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 10}, t0)
	for r := 1; r < yieldRounds; r++ {
		// One success per round trip: each was sent when the last came back.
		assert.Equal(t, None, c.ObserveAt(ok(1, 6), at(float64(r))), "round trip %d", r)
	}
	// The last quiet round trip: give back 30% of the 6 in flight.
	y := float64(yieldRounds)
	require.Equal(t, Yielded, c.ObserveAt(ok(1, 6), at(y)))
	st := c.State()
	assert.InDelta(t, 4.2, st.Target, 1e-9, "min(6 × 0.7, 6-1)")
	assert.Equal(t, uint64(1), st.Yields)
	assert.Zero(t, st.Decreases, "a yield is not a decrease")
	assert.True(t, st.LastDecrease.IsZero())
	// Answers to calls sent before the yield change nothing: the freed
	// slots stay free for a round trip.
	assert.Equal(t, None, c.ObserveAt(ok(1, 5), at(y+0.5)), "sent half a round trip before")
	assert.Equal(t, None, c.ObserveAt(limited(0.6, 4), at(y+0.5)), "429 for a call sent just before")
	assert.InDelta(t, 4.2, c.State().Target, 1e-9)
	// Then slow start back: +2 per in-use success of a call sent after it
	// (no level is remembered: the lane never saw congestion).
	for i, want := range []int{6, 8, 10} {
		assert.Equal(t, Increased, c.ObserveAt(inUse(c, 0.5), at(y+1+0.01*float64(i))), "success %d", i)
		assert.Equal(t, want, c.Limit(), "success %d", i)
	}
	// What a competitor took shows as a 429 on the way back: an ordinary
	// decrease.
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(y+1.5)))
	assert.Equal(t, 9, c.Limit(), "10.2 × 0.9 = 9.18")
}

func TestDefaultYieldClockRestartsWhenCapacityGrows(t *testing.T) {
	// A lane cut by a 429 at 10 that then finds, quietly, that 10 calls
	// go through: the capacity grew, it slow-starts into what is free,
	// and it does not yield on round trips counted while it was held back
	// below 10 (in S4 the lanes left after others stop yielded just as
	// they got to the free slots, which nobody else wanted).
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 10}, t0)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 10), at(0.5)))
	require.EqualValues(t, 10, c.State().DecreaseLevel)
	grew, yielded := 0, 0
	for r := 1; r <= 3*yieldRounds && yielded == 0; r++ {
		// One round trip per second, the whole limit in use.
		ev := c.ObserveAt(inUse(c, 1), at(0.5+float64(r)))
		if grew == 0 && c.State().DecreaseLevel == 0 {
			grew = r
		}
		if ev == Yielded {
			yielded = r
		}
	}
	require.NotZero(t, grew, "the lane found that 10 calls go through")
	assert.Greater(t, grew, 1, "not at once: it held below 10 first")
	assert.Equal(t, grew+yieldRounds, yielded, "the yield comes yieldRounds quiet round trips after the growth")
}

func TestDefaultYieldClock(t *testing.T) {
	t.Run("congestion restarts it", func(t *testing.T) {
		c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 10}, t0)
		for r := 1; r < yieldRounds; r++ {
			require.Equal(t, None, c.ObserveAt(ok(1, 6), at(float64(r))), "round trip %d", r)
		}
		require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 6), at(7.5)))
		// Round trips end at 8.6, 9.6, …: the yieldRounds-th quiet one
		// after the 429 yields.
		for r := range yieldRounds - 1 {
			assert.Equal(t, None, c.ObserveAt(ok(1, 5), at(8.6+float64(r))), "round trip %d after the 429", r+1)
		}
		assert.Equal(t, Yielded, c.ObserveAt(ok(1, 5), at(8.6+float64(yieldRounds-1))))
	})
	t.Run("at most one yield a second", func(t *testing.T) {
		// Round trips of 1ms (a provider that answers at once): yieldRounds
		// of them are not enough; the first round trip a second after the start is.
		// (At most Initial/yieldShare calls: the period of a larger lane
		// whose yield went untaken is stretched.)
		c := New(Config{AdmissionWindow: -1, Max: 30, Initial: 10}, t0)
		for r := 1; r < 1000; r++ {
			require.Equal(t, None, c.ObserveAt(ok(0.001, 6), at(0.001*float64(r))), "round trip %d", r)
		}
		require.Equal(t, Yielded, c.ObserveAt(ok(0.001, 6), at(1)))
		// A second from that yield, not yieldRounds round trips, to the next one.
		require.Equal(t, Increased, c.ObserveAt(inUse(c, 0.001), at(1.002)), "a call sent after the yield: slow start back")
		for r := 3; r < 1000; r++ {
			ev := c.ObserveAt(ok(0.001, c.Limit()), at(1+0.001*float64(r)))
			require.NotEqual(t, Yielded, ev, "round trip %d after the yield", r)
		}
		assert.Equal(t, Yielded, c.ObserveAt(ok(0.001, c.Limit()), at(2.001)))
		assert.EqualValues(t, 2, c.State().Yields)
	})
	t.Run("nothing to give from one call", func(t *testing.T) {
		c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 10}, t0)
		for r := 1; r <= 2*yieldRounds; r++ {
			assert.Equal(t, None, c.ObserveAt(ok(1, 1), at(float64(r))), "round trip %d", r)
		}
		assert.Zero(t, c.State().Yields)
		assert.Equal(t, 10, c.Limit())
	})
}

func TestDefaultProbeHold(t *testing.T) {
	// 1 + limit/3 round trips, at most ProbeHold: lanes with a small share
	// probe more often, which is how they win slots from larger ones.
	for _, tc := range []struct {
		limit, probeHold, want int
	}{
		{1, 0, 1}, {2, 0, 1}, {3, 0, 2}, {5, 0, 2}, {6, 0, 3}, {8, 0, 3},
		{9, 0, 4}, {16, 0, 4}, {64, 0, 4},
		{9, 2, 2}, {16, 10, 6}, {64, 1, 1},
	} {
		c := New(Config{AdmissionWindow: -1, Max: 64, Initial: float64(tc.limit), ProbeHold: tc.probeHold}, t0)
		c.mu.Lock()
		got := c.probeHoldLocked(t0)
		c.mu.Unlock()
		assert.Equal(t, tc.want, got, "limit %d, ProbeHold %d", tc.limit, tc.probeHold)
	}
}

func TestDefaultProbeHoldRecallsRecentPeak(t *testing.T) {
	// A lane that had 32 calls answered at once, with round trips of 1s.
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 32}, t0)
	require.Equal(t, Increased, c.ObserveAt(ok(1, 32), at(1)))
	hold := func(limit int, sec float64) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.target = float64(limit)
		return c.probeHoldLocked(at(sec))
	}
	// Cut to 8 (the provider's capacity dropped): it probes after one
	// clean round trip, not three, to find the capacity when it comes back.
	assert.Equal(t, 1, hold(8, 2))
	assert.Equal(t, 1, hold(8, 60), "the peak fades by e every 64 round trips: 32/e^(59/64) = 12.7 > 8/0.7")
	assert.Equal(t, 3, hold(8, 70), "32/e^(69/64) = 10.9 < 8/0.7: the usual hold")
	// Near the peak (at least 0.7 of it), the usual hold.
	assert.Equal(t, 4, hold(23, 2))
	assert.Equal(t, 1, hold(22, 2))
}

// underCap runs a lane alone under a hard cap for n probes, from *sec
// on, in round trips of 1 s: the calls the limit lets out at the start of
// a round trip, of which those beyond cap draw a 429 at once and the
// others succeed a second later. It returns the clean round trips before
// each round trip with 429s (a probe), and every event seen.
func underCap(t *testing.T, c *Controller, cap, n int, sec *float64) (gaps []int, events []Event) {
	t.Helper()
	gap := 0
	for len(gaps) < n {
		require.Less(t, gap, 1000, "the lane never probes")
		sent := at(*sec)
		calls := c.Limit()
		inFlight := calls
		for k := range calls - min(calls, cap) {
			s := limited(0, inFlight)
			s.Dispatched = sent
			events = append(events, c.ObserveAt(s, at(*sec+0.0001*float64(k+1))))
			inFlight--
		}
		for i := range inFlight {
			s := ok(1, inFlight-i)
			s.Dispatched = sent
			events = append(events, c.ObserveAt(s, at(*sec+1+0.001*float64(i))))
		}
		if calls > cap {
			gaps = append(gaps, gap)
			gap = 0
		} else {
			gap++
		}
		*sec += 1.1
	}
	return gaps, events
}

// smallLane returns a lane past its newcomer phase whose target is
// target, with no decrease yet.
func smallLane(t *testing.T, target float64) *Controller {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0) // Initial 8
	warm(t, c)
	c.mu.Lock()
	c.target = target
	c.mu.Unlock()
	return c
}

func TestDefaultProbeBackoff(t *testing.T) {
	// A lane alone under a cap of 1, 2 or 4: each probe asks for one call
	// more than the cap and draws a 429, at the same ceiling every time.
	for _, cap := range []int{1, 2, 4} {
		c := smallLane(t, float64(cap))
		sec := 10.0
		gaps, events := underCap(t, c, cap, 20, &sec)
		t.Logf("cap %d: clean round trips before each probe: %v", cap, gaps)
		// Once the ceiling has been found again 5 times in a row, the
		// hold doubles at every find, up to 64 calls: 64/cap round trips
		// (and the round trip of the probe).
		most := 64/cap + 1
		assert.LessOrEqual(t, slices.Min(gaps), 3, "cap %d: probing at the usual pace at first: %v", cap, gaps)
		from := slices.Index(gaps, 5)
		require.GreaterOrEqual(t, from, 0, "cap %d: the hold doubles: %v", cap, gaps)
		for i := from + 1; i < len(gaps); i++ {
			assert.Equal(t, min(2*gaps[i-1]-1, most), gaps[i], "cap %d: the hold doubles: %v", cap, gaps)
		}
		assert.Equal(t, most, gaps[len(gaps)-1], "cap %d: at most 64 calls between probes: %v", cap, gaps)
		// A backed-off lane does not yield, however quiet it is.
		assert.NotContains(t, events, Yielded, "cap %d", cap)
		assert.Equal(t, cap, c.Limit(), "cap %d: back below the ceiling after a probe", cap)
	}
}

func TestDefaultProbeBackoffStopsWhenTheCeilingMoves(t *testing.T) {
	c := smallLane(t, 4)
	sec := 10.0
	gaps, _ := underCap(t, c, 4, 10, &sec)
	require.GreaterOrEqual(t, gaps[len(gaps)-1], 9, "backed off: %v", gaps)
	// The cap falls to 3 (someone else took a slot, or the provider
	// lowered it): a 429 at a lower level. Back to the usual pace.
	gaps, _ = underCap(t, c, 3, 3, &sec)
	assert.LessOrEqual(t, slices.Max(gaps), 4, "a new ceiling, the usual hold of 1 + 3/3 round trips: %v", gaps)
	// Another Governor sharing the lane decreased (coordination): the
	// lane is not alone either.
	gaps, _ = underCap(t, c, 3, 6, &sec)
	require.GreaterOrEqual(t, gaps[len(gaps)-1], 5, "backed off: %v", gaps)
	c.Adopt(3, at(sec), 4)
	sec += 1.1
	gaps, _ = underCap(t, c, 3, 1, &sec)
	assert.LessOrEqual(t, gaps[0], 3, "after an adopted decrease, the usual hold: %v", gaps)
}

func TestDefaultProbeBackoffAboveHalfInitial(t *testing.T) {
	// A lane alone under a cap of 5 (5/8 of Initial) backs off as one
	// under a cap of 4 does: the hold doubles from the 5th find on, up
	// to 64 calls: 13 round trips (and the round trip of the probe).
	c := smallLane(t, 5)
	sec := 10.0
	gaps, _ := underCap(t, c, 5, 14, &sec)
	t.Logf("cap 5: clean round trips before each probe: %v", gaps)
	assert.Equal(t, []int{14, 14}, gaps[len(gaps)-2:], "cap 5: %v", gaps)
	// Above that, a lane's probes are how a cap shared among processes
	// gets split (S4: lanes near Initial), so the back-off first only
	// lengthens the hold to ProbeHold (4) round trips. A cap of 6 or 8:
	// 1 + limit/3 = 3 round trips at first; from the 5th find of the same
	// ceiling in a row, 4; from the 15th, with the ceiling never moved,
	// 64 calls (11 or 8 round trips), as at a smaller ceiling.
	for _, cap := range []int{6, 8} {
		c := smallLane(t, float64(cap))
		sec := 10.0
		gaps, events := underCap(t, c, cap, 20, &sec)
		t.Logf("cap %d: clean round trips before each probe: %v", cap, gaps)
		assert.Equal(t, []int{4, 4}, gaps[4:6], "cap %d: the usual hold of 3 round trips: %v", cap, gaps)
		first := slices.Index(gaps, 5)
		require.Positive(t, first, "cap %d: backed off to ProbeHold round trips: %v", cap, gaps)
		assert.Equal(t, slices.Repeat([]int{5}, 10), gaps[first:first+10], "cap %d: ProbeHold round trips from the 5th find to the 14th: %v", cap, gaps)
		most := (64+cap-1)/cap + 1
		assert.Equal(t, []int{most, most}, gaps[first+10:first+12], "cap %d: found 15 times in a row, backed off to 64 calls: %v", cap, gaps)
		assert.NotContains(t, events, Yielded, "cap %d", cap)
		assert.Equal(t, cap, c.Limit(), "cap %d", cap)
	}
}

func TestDefaultProbeBackoffNotOnceTheCeilingMoved(t *testing.T) {
	// A lane at a cap of 6 backs off (above), then the cap rises to 7: a
	// probe succeeds above the ceiling. The lane's ceilings have moved
	// once: it shares the provider or sees its capacity change, and keeps
	// the usual hold above Initial/2 from then on, however often it finds
	// the new ceiling.
	c := smallLane(t, 6)
	sec := 10.0
	gaps, _ := underCap(t, c, 6, 10, &sec)
	require.Equal(t, 5, gaps[len(gaps)-1], "backed off: %v", gaps)
	gaps, _ = underCap(t, c, 7, 14, &sec)
	t.Logf("cap 7: clean round trips before each probe: %v", gaps)
	assert.Equal(t, 4, slices.Max(gaps[3:]), "the usual hold of 1 + 7/3 round trips: %v", gaps)
	assert.Equal(t, 7, c.Limit())

	// The same after a probe finds a lower ceiling (a slot taken by
	// another process): 6, then 5.
	c = smallLane(t, 6)
	sec = 10.0
	underCap(t, c, 6, 10, &sec)
	gaps, _ = underCap(t, c, 5, 14, &sec)
	assert.Equal(t, 3, slices.Max(gaps[3:]), "the usual hold of 1 + 5/3 round trips: %v", gaps)

	// At most Initial/2 the back-off to 64 calls goes on regardless: a
	// lane alone under a cap of 2 to 4 must not pay a probe per few
	// round trips for ever because the cap moved once.
	c = smallLane(t, 4)
	sec = 10.0
	underCap(t, c, 4, 3, &sec)
	gaps, _ = underCap(t, c, 3, 12, &sec)
	assert.GreaterOrEqual(t, gaps[len(gaps)-1], 16, "cap 3, backed off: %v", gaps)
}

func TestDecreaseCause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		preset  Preset
		samples []Sample
		secs    []float64
		want    Outcome
	}{
		{"default 429", Default, []Sample{limited(0.001, 8)}, []float64{1}, RateLimited},
		{"default timeout", Default, []Sample{timedOut(0.5)}, []float64{1}, Timeout},
		// Phoenix decreases when a window ends, here on a success: the
		// cause is what the window held.
		{"phoenix window of timeouts", Phoenix, []Sample{timedOut(0.5), ok(1, 0)}, []float64{1, 6}, Timeout},
		{"phoenix window with a 429", Phoenix, []Sample{timedOut(0.5), limited(0.1, 0), ok(1, 0)}, []float64{1, 2, 6}, RateLimited},
	} {
		c := New(Config{Preset: tc.preset, Max: 16, Initial: 8}, t0)
		assert.Equal(t, Success, c.State().DecreaseCause, "%s: none yet", tc.name)
		var ev Event
		for i, s := range tc.samples {
			ev = c.ObserveAt(s, at(tc.secs[i]))
		}
		assert.Equal(t, Decreased, ev, tc.name)
		assert.Equal(t, tc.want, c.State().DecreaseCause, tc.name)
	}
}

func TestDefaultStormNeedsARoundTrip(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 20}, t0)
	warm(t, c) // latency EWMA 0.4s
	require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(10)))
	// A second fresh 429 a millisecond later, nothing answered between:
	// the lane's other calls have not had time to; not a storm (and, at
	// or below the starting level, a squeeze: no cut).
	assert.Equal(t, None, c.ObserveAt(limited(0.0005, 19), at(10.001)))
	assert.False(t, c.State().Collapsed)
	assert.InDelta(t, 18, c.State().Target, 1e-9)
	// Still nothing answered half a second (more than the 0.4s latency)
	// after the first: a storm.
	assert.Equal(t, Collapsed, c.ObserveAt(limited(0.001, 18), at(10.5)))
}

// aloneAtMax returns a lane alone whose clients fill its Max: every
// yield frees slots that nobody takes. Round trips of 1 s, each success
// sent when the one before came back.
func aloneAtMax(t *testing.T, max int, initial float64) *Controller {
	t.Helper()
	c := New(Config{AdmissionWindow: -1, Max: max, Initial: initial}, t0)
	for i := 0; c.Limit() < max; i++ {
		require.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i))), "success %d", i)
	}
	return c
}

// untilYield runs quiet round trips of 1 s with inFlight calls in flight
// from from on, and returns the instant of the yield.
func untilYield(t *testing.T, c *Controller, from float64, inFlight int) float64 {
	t.Helper()
	for r := 1; r <= 4*yieldRounds; r++ {
		sec := from + float64(r)
		if ev := c.ObserveAt(ok(1, inFlight), at(sec)); ev == Yielded {
			return sec
		}
	}
	require.FailNow(t, "no yield")
	return 0
}

// backToMax slow-starts the lane back to max with calls sent after a
// yield at y: the round trip after the yield.
func backToMax(t *testing.T, c *Controller, y float64, max int) {
	t.Helper()
	for i := 0; c.Limit() < max; i++ {
		require.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(y+1.01+0.01*float64(i))), "success %d after the yield", i)
	}
}

// holdOneSlot checks the yield of one call at y: the lane keeps its slot
// free for yieldProbeRounds round trips of 1 s (each answer to a call sent
// 0.1 s into its round), the whole limit in use, then grows back to max.
func holdOneSlot(t *testing.T, c *Controller, y float64, max int) {
	t.Helper()
	require.Equal(t, max-1, c.Limit(), "one call given back")
	for r := 1; r < yieldProbeRounds; r++ {
		require.Equal(t, None, c.ObserveAt(inUse(c, 0.9), at(y+float64(r))), "round trip %d after the yield", r)
		require.Equal(t, max-1, c.Limit(), "round trip %d after the yield: the slot stays free", r)
	}
	require.Equal(t, Increased, c.ObserveAt(inUse(c, 0.9), at(y+yieldProbeRounds)), "round trip %d after the yield", yieldProbeRounds)
	require.Equal(t, max, c.Limit())
}

func TestDefaultYieldNobodyWants(t *testing.T) {
	// A lane alone, its 64 calls the whole of its Max (Initial 8): no
	// congestion signal ever comes, so nobody is known to want its slots.
	t.Run("one call, its slot free for yieldProbeRounds round trips", func(t *testing.T) {
		c := aloneAtMax(t, 64, 8)
		y := untilYield(t, c, 1, 64)
		holdOneSlot(t, c, y, 64)
		// Back at 64 with no congestion signal on the way: nobody took
		// the slot. The next yield is one call again, 20 quiet round
		// trips later (the 4 of the hold count).
		next := untilYield(t, c, y+yieldProbeRounds, 64)
		assert.Equal(t, y+2*yieldRounds, next, "yieldRounds × untakenStretch round trips after the last yield")
		holdOneSlot(t, c, next, 64)
		assert.EqualValues(t, 2, c.State().Yields)
	})
	t.Run("a congestion signal brings back 30%", func(t *testing.T) {
		c := aloneAtMax(t, 64, 8)
		y := untilYield(t, c, 1, 64)
		holdOneSlot(t, c, y, 64)
		// A 429: someone else wants slots. The yields come every 10 quiet
		// round trips again, and give back 30%.
		y += yieldProbeRounds + 0.5
		require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 64), at(y)))
		in := c.Limit()
		next := untilYield(t, c, y+0.1, in)
		assert.Equal(t, y+0.1+yieldRounds, next, "yieldRounds round trips after the 429")
		assert.Equal(t, int(float64(in)*(1-yieldShare)), c.Limit(), "30%% of %d", in)
	})
	t.Run("a 429 while the slot is held ends the hold", func(t *testing.T) {
		// A process that joined took the slot, and the lane's next call
		// beyond what the provider holds is refused: an ordinary decrease,
		// and slow start back from there.
		c := aloneAtMax(t, 64, 8)
		y := untilYield(t, c, 1, 64)
		require.Equal(t, 63, c.Limit())
		require.Equal(t, None, c.ObserveAt(inUse(c, 1), at(y+1)))
		require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 63), at(y+1.5)))
		cut := c.Limit()
		require.Less(t, cut, 63)
		assert.Equal(t, Increased, c.ObserveAt(inUse(c, 1), at(y+2.6)), "a call sent after the cut grows the limit at once")
		assert.Greater(t, c.Limit(), cut)
	})
	t.Run("at most Initial/yieldShare calls: 30%", func(t *testing.T) {
		// 20 calls: a yield of 30% gives back 6, fewer than Initial, and
		// keeps its size and period untaken or not.
		c := aloneAtMax(t, 20, 8)
		y := untilYield(t, c, 1, 20)
		require.Equal(t, 14, c.Limit())
		backToMax(t, c, y, 20)
		next := untilYield(t, c, y+1, 20)
		assert.Equal(t, y+1+yieldRounds, next)
		assert.Equal(t, 14, c.Limit())
	})
	t.Run("a yield the lane does not get back from", func(t *testing.T) {
		// A lane of 20 calls (Initial 4) that met a 429: its yields give
		// back 30%. Its clients send fewer calls after the first: the
		// limit never gets back to where it was, so nothing says the
		// yield was not taken, and the next one gives back 30% again.
		c := aloneAtMax(t, 20, 4)
		require.Equal(t, Decreased, c.ObserveAt(limited(0.001, 20), at(2)))
		require.Equal(t, 18, c.Limit())
		untilYield(t, c, 2.1, 18)
		require.Equal(t, 12, c.Limit(), "18 × 0.7 = 12.6")
		y := untilYield(t, c, 30, 12)
		assert.Equal(t, 8, c.Limit(), "12 × 0.7 = 8.4: 30%")
		assert.Greater(t, y, 30.0)
	})
}

// A 429 or a timeout records the level at which the provider refused:
// the calls at the provider, not those the caller holds unsent in their
// slots for a budget (Sample.Unsent), which it never saw.
func TestDefaultRefusalLevelIsTheCallsAtTheProvider(t *testing.T) {
	c := from20(t)
	s := limited(0.05, 20)
	s.Unsent, s.Held = 6, true
	require.Equal(t, Decreased, c.ObserveAt(s, at(1)))
	st := c.State()
	assert.InDelta(t, 14, st.DecreaseLevel, 1e-9, "20 in flight, 6 of them held")
	assert.Equal(t, 12, st.Limit, "the provider held 13 and refused one more: one slot below 13")

	c = from20(t)
	require.Equal(t, Decreased, c.ObserveAt(limited(0.05, 20), at(1)))
	st = c.State()
	assert.InDelta(t, 20, st.DecreaseLevel, 1e-9, "none held: every call in flight was at the provider")
	assert.Equal(t, 18, st.Limit, "20 × 0.9")
}
