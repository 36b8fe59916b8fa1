package aimd

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answer feeds c one success per latency, all dispatched at sent,
// answered in order of latency after a millisecond apart at least. It
// returns the last event and instant. The calls in flight go unreported
// (the limit counts as in use): these feeds answer a few of the calls
// each round lets out, and a lane that counted its calls would read the
// others as overdue (overdue.go).
func answer(c *Controller, sent time.Time, lats ...float64) (Event, time.Time) {
	var ev Event
	var now time.Time
	for i, l := range lats {
		now = sent.Add(secs(l)).Add(time.Duration(i) * time.Millisecond)
		ev = c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(sent), Dispatched: sent}, now)
		if ev == Decreased || ev == Collapsed {
			return ev, now
		}
	}
	return ev, now
}

// ceiling gives c a 429 at its limit at now: a level for its slow starts
// to stop below, so that a rise in latency on the way there stops growth
// but does not end them (startExitLocked).
func ceiling(t *testing.T, c *Controller, now time.Time) {
	t.Helper()
	ev := c.ObserveAt(Sample{Outcome: RateLimited, Latency: time.Millisecond, InFlight: c.Limit(), Dispatched: now.Add(-time.Millisecond)}, now)
	require.Equal(t, Decreased, ev)
}

// flat is 8 latencies of about 1 s (a 5% spread).
var flat = []float64{0.95, 1.05, 1, 0.97, 1.03, 0.99, 1.01, 1}

func scaled(lats []float64, f float64) []float64 {
	out := make([]float64, len(lats))
	for i, l := range lats {
		out[i] = l * f
	}
	return out
}

// Calls sent under a higher limit take three times as long as those sent
// under a lower one: the provider queues them. The limit comes back to
// the highest level whose calls took the usual time.
func TestLatencyThatClimbsWithTheLimitCutsToTheFlatLevel(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, flat...) // sent under 8
	sent := at(1.1)
	l24 := c.Limit()
	require.Equal(t, 24, l24, "slow start: +2 per success")
	answer(c, sent, flat...) // sent under 24, as fast
	l40 := c.Limit()
	require.Greater(t, l40, 32)

	ev, _ := answer(c, at(6), scaled(flat, 3)...) // sent under 40: 3 s
	assert.Equal(t, Decreased, ev)
	st := c.State()
	assert.Equal(t, l24, st.Limit, "back to the level whose calls took 1 s")
	assert.Equal(t, Success, st.DecreaseCause, "a latency cut: the calls succeeded, slowly")
	assert.GreaterOrEqual(t, st.DecreaseLevel, float64(l40), "the level it came down from")

	off := New(Config{AdmissionWindow: -1, Max: 64, LatencyTolerance: -1}, t0)
	answer(off, t0, flat...)
	answer(off, sent, flat...)
	ev, _ = answer(off, at(6), scaled(flat, 3)...)
	assert.NotEqual(t, Decreased, ev, "without the latency signal, slow answers cut nothing")
}

// When every level the lane knows is slower than the lowest, the lowest
// may be past the knee too: the cut goes a bin below it, so that the
// profile learns what a lower level gives.
func TestLatencyCutBelowTheBaselineWhenNothingIsFlat(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, flat...) // sent under 8
	require.Equal(t, 24, c.Limit())
	ceiling(t, c, at(1.5))
	ev, _ := answer(c, at(6), scaled(flat, 3)...) // sent under 22
	require.Equal(t, Decreased, ev)
	assert.Equal(t, 6, c.Limit(), "8 × 2^-¼ = 6.7: a bin below the baseline")
}

// Latency that varies 25 times over from one call to the next (output
// lengths, a heavy tail) but as much at every level is no congestion,
// though a higher level happened to draw more slow calls.
func TestLatencyThatVariesByItselfCutsNothing(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, 0.2, 1, 5, 0.2, 1, 5, 0.2, 1) // sent under 8
	require.Greater(t, c.Limit(), 16, "a level two octaves up")
	ev, _ := answer(c, at(12), 1, 5, 0.2, 1, 5, 0.2, 1, 5, 5) // sent under 24
	assert.NotEqual(t, Decreased, ev)
	assert.Zero(t, c.State().Decreases)

	// The same means with no spread are 1.5 times apart: congestion.
	steady := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(steady, t0, flat...)
	ev, _ = answer(steady, at(12), scaled(flat, 1.5)...)
	assert.Equal(t, Decreased, ev, "1.5 times the latency with a 5%% spread is queueing")
}

// Calls a little slower than the baseline's, by less than
// LatencyTolerance, read flat; but against a server whose latency rises
// with the square of the calls in flight, a level 1.18 times as slow is
// 1.09 times its knee. A cut to that flat level goes to where such a rise
// would give the baseline's latency, within the level's bin.
func TestLatencyCutWithinTheFlatBin(t *testing.T) {
	// cutFrom returns the limit after 8 calls of 1 s sent under 8, 8
	// sent under level that took f times that, and one sent above level
	// that took 3 s.
	cutFrom := func(level int, f float64) int {
		c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
		answer(c, t0, flat...) // sent under 8: the baseline
		c.mu.Lock()
		c.target = float64(level)
		c.recordLimitLocked(at(1.1))
		c.mu.Unlock()
		answer(c, at(1.1), scaled(flat, f)...)
		require.Zero(t, c.State().Decreases, "slower by less than the tolerance: flat")
		require.Greater(t, c.Limit(), level)
		sent := at(2.5)
		c.mu.Lock()
		c.recordLimitLocked(sent)
		c.mu.Unlock()
		ev := c.ObserveAt(Sample{Outcome: Success, Latency: secs(3), Dispatched: sent}, sent.Add(secs(3)))
		require.Equal(t, Decreased, ev)
		return c.Limit()
	}
	assert.Equal(t, 26, cutFrom(26, 1), "as fast as the baseline: the level itself")
	assert.Equal(t, 24, cutFrom(26, 1.1), "26 × 1.1^-½ = 24.8")
	assert.Equal(t, 23, cutFrom(26, 1.18), "26 × 1.18^-½ = 23.9")
	assert.Equal(t, 22, cutFrom(23, 1.18), "23 × 1.18^-½ = 21.2, but the bin starts at 22.6")
}

// Once the lane has cut on latency, it grows into a bin of levels only
// when the bin below it is known flat: a probe above the knee costs at
// most a bin's worth of calls.
func TestLatencyCutGatesGrowthBinByBin(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, flat...)
	answer(c, at(1.1), flat...)
	ev, now := answer(c, at(6), scaled(flat, 3)...)
	require.Equal(t, Decreased, ev)
	require.Equal(t, 24, c.Limit())

	gate := func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.latencyGateLocked(now)
	}
	// 24 is in the bin of 22.6 to 26.9; the next one is 26.9 to 32.
	assert.InDelta(t, 29, gate(), 1e-9, "two levels past the first of the bin above the flat one")
	// Calls sent under the limit after the cut (24), fast: nothing new.
	answer(c, now.Add(time.Millisecond), flat...)
	assert.InDelta(t, 29, gate(), 1e-9)

	// Drive the limit to 28 and answer 8 calls sent under it at the
	// usual latency: the gate opens a bin further.
	c.mu.Lock()
	c.target = 28
	c.recordLimitLocked(now.Add(3 * time.Second))
	c.mu.Unlock()
	answer(c, now.Add(3*time.Second), flat...)
	assert.InDelta(t, 34, gate(), 1e-9, "bin 26.9-32 is flat: into 32-38, up to 34")

	// A bin of fewer levels is open to its top: 4.76 to 5.66 past a flat
	// bin of 4.
	small := New(Config{AdmissionWindow: -1, Max: 64, Initial: 4}, t0)
	answer(small, t0, flat...) // sent under 4
	small.mu.Lock()
	small.defaultRule.latencySeen = true
	g := small.latencyGateLocked(at(3))
	small.mu.Unlock()
	assert.InDelta(t, math.Exp2(10.0/4), g, 1e-9)
}

// A lane cut back to the same level by its latency again and again (a
// knee that stays put) probes above it less and less often; a cut to
// another level, or any other decrease, ends that.
func TestLatencyCutsToOneLevelProbeLessOften(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	for i := range 8 {
		c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i)))
	}
	cut := func(level float64, sec float64) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.target = 12
		c.latencyDecreaseLocked(level, at(sec))
		return c.probeHoldLocked(at(sec))
	}
	hold := cut(8, 2)
	require.Equal(t, 1+8/3, hold, "the usual hold at 8")
	assert.Equal(t, hold, cut(8, 3), "the second cut to 8: still the usual hold")
	assert.Equal(t, 2*hold, cut(8, 4), "the third: doubled")
	assert.Equal(t, 4*hold, cut(8, 5))
	assert.Equal(t, 8*hold, cut(8, 5.5))
	assert.Equal(t, latencyHoldMax, cut(8, 6), "at most latencyHoldMax round trips")
	assert.Equal(t, 1+5/3, cut(5.5, 7), "a cut to another level: the usual hold there")

	cut(8, 8)
	cut(8, 9)
	require.Equal(t, 2*hold, cut(8, 10))
	c.ObserveAt(Sample{Outcome: Success, Latency: secs(0.2), InFlight: 8, Dispatched: at(10.2)}, at(10.4))
	require.Equal(t, Decreased, c.ObserveAt(Sample{Outcome: RateLimited, Latency: time.Millisecond, InFlight: 9, Dispatched: at(10.5)}, at(11)))
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Zero(t, c.defaultRule.backoff.doubled(latencyCeiling), "a 429 ends the back-off")
}

// A lane backed off at a latency knee of 8 still yields after ten quiet
// round trips (the lower level keeps its baseline measured), but gives
// back the whole number of calls nearest 30%: 2 of 8, not the 3 that
// rounding the limit down would take.
func TestYieldAtALatencyKneeGivesBackTheNearestCalls(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	for i := range 8 {
		c.ObserveAt(inUse(c, 1), at(1+0.01*float64(i)))
	}
	for i := range 4 {
		c.mu.Lock()
		c.target = 12
		c.latencyDecreaseLocked(8, at(2+float64(i)))
		c.mu.Unlock()
	}
	c.mu.Lock()
	require.Positive(t, c.defaultRule.backoff.doubled(latencyCeiling), "backed off at the knee")
	require.Greater(t, c.probeHoldLocked(at(6)), yieldRounds, "no probe before the yield")
	c.mu.Unlock()
	require.Equal(t, 8, c.Limit())
	for r := 1; r < yieldRounds; r++ {
		// One success per round trip, each sent when the last came back.
		require.Equal(t, None, c.ObserveAt(ok(1, 8), at(6+float64(r))), "round trip %d", r)
	}
	require.Equal(t, Yielded, c.ObserveAt(ok(1, 8), at(6+float64(yieldRounds))))
	assert.Equal(t, 6, c.Limit(), "8 × 0.7 = 5.6: 6 calls, not 5")
}

// A lane in its first slow start, whose call sent under a higher limit
// takes three times as long as those sent under its first, ends slow
// start at that answer: the provider queues what slow start added, and
// every round trip more would triple what it queues. The limit comes back
// to the level whose calls took the usual time. Where latency varies as
// much by itself, the same answer ends nothing; and a slow start back to
// a ceiling that a 429 found stops there anyway: the answer only stops
// its growth.
func TestSlowStartEndsAtARiseInLatency(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, flat...) // sent under 8, about 1 s
	require.Equal(t, 24, c.Limit())
	sent := at(1.1) // under 24
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: secs(3), InFlight: 24, Dispatched: sent}, sent.Add(secs(3)))
	assert.Equal(t, Decreased, ev)
	st := c.State()
	assert.Equal(t, 8, st.Limit, "back to the level whose calls took 1 s")
	assert.Equal(t, Success, st.DecreaseCause, "a latency cut: the call succeeded, slowly")

	spread := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(spread, t0, 1, 2, 5, 1, 2, 5, 1, 2) // 1 to 5 s
	require.Equal(t, 24, spread.Limit())
	ev = spread.ObserveAt(Sample{Outcome: Success, Latency: secs(5), InFlight: 24, Dispatched: at(6)}, at(11))
	assert.NotEqual(t, Decreased, ev, "5 s is nothing unusual where calls take 1 to 5 s")
	assert.GreaterOrEqual(t, spread.Limit(), 24)

	capped := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(capped, t0, flat...)
	ceiling(t, capped, at(1.05))
	before := capped.Limit()
	ev = capped.ObserveAt(Sample{Outcome: Success, Latency: secs(3), InFlight: before, Dispatched: sent}, sent.Add(secs(3)))
	assert.Equal(t, None, ev, "slow start back below a 429's level: no growth, no exit")
	assert.Equal(t, before, capped.Limit())

	off := New(Config{AdmissionWindow: -1, Max: 64, LatencyTolerance: -1}, t0)
	answer(off, t0, flat...)
	ev = off.ObserveAt(Sample{Outcome: Success, Latency: secs(3), InFlight: 24, Dispatched: sent}, sent.Add(secs(3)))
	assert.NotEqual(t, Decreased, ev, "without the latency signal, slow start goes on")
}

// The slow start's exit reads one answer against the mean of the lowest
// level's 8 calls, which is itself off by chance: the answer must lie
// beyond 4 standard deviations of a new call about that mean, σ·√(1 +
// 1/8), not of a call about the true one. Slower than that, it ends the
// slow start; between the two, it only does not grow the limit.
func TestSlowStartExitAllowsForTheLowestLevelsMean(t *testing.T) {
	lowest := []float64{0.8, 0.85, 0.9, 1, 1, 1.1, 1.15, 1.2} // log sd 0.146: 4σ is ×1.79, with the mean's error ×1.85
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, lowest...)
	before := c.Limit()
	sent := at(1.3) // under 24
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: secs(1.81), InFlight: before, Dispatched: sent}, sent.Add(secs(1.81)))
	assert.Equal(t, None, ev, "1.81 s: past 4σ of the calls, within 4σ of a new call")
	assert.Equal(t, before, c.Limit(), "but past 3σ: no growth")

	exit := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(exit, t0, lowest...)
	ev = exit.ObserveAt(Sample{Outcome: Success, Latency: secs(1.9), InFlight: before, Dispatched: sent}, sent.Add(secs(1.9)))
	assert.Equal(t, Decreased, ev, "1.9 s: past 4σ of a new call")
	assert.Equal(t, 8, exit.Limit())
}

// A success slower than the calls sent with the fewest in flight by more
// than chance explains does not grow the limit: the provider has started
// to queue the calls the lane just added. Where latency varies a lot by
// itself, the same answer does.
func TestSuccessSlowerThanChanceDoesNotGrow(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(c, t0, flat...) // sent under 8, about 1 s
	ceiling(t, c, at(1.5))
	before := c.Limit()
	sent := at(2)
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: secs(1.5), InFlight: before, Dispatched: sent}, sent.Add(secs(1.5)))
	assert.Equal(t, None, ev)
	assert.Equal(t, before, c.Limit(), "1.5 s against calls of 1 s ± 5%%: no growth")
	c.ObserveAt(Sample{Outcome: Success, Latency: secs(1.1), InFlight: before, Dispatched: sent}, sent.Add(secs(1.6)))
	assert.Greater(t, c.Limit(), before, "1.1 s: within the tolerance, slow start goes on")

	spread := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(spread, t0, 1, 2, 5, 1, 2, 5, 1, 2) // 1 to 5 s
	ceiling(t, spread, at(5.5))
	before = spread.Limit()
	spread.ObserveAt(Sample{Outcome: Success, Latency: secs(4), InFlight: before, Dispatched: at(6)}, at(10))
	assert.Greater(t, spread.Limit(), before, "4 s is nothing unusual where calls take 1 to 5 s")

	steady := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	answer(steady, t0, flat...)
	ceiling(t, steady, at(1.5))
	before = steady.Limit()
	steady.ObserveAt(Sample{Outcome: Success, Latency: secs(4), InFlight: before, Dispatched: at(6)}, at(10))
	assert.Equal(t, before, steady.Limit(), "4 s where calls take 1 s: no growth")
}

// startRound answers the 8 calls a lane lets out at New in about a second
// (flat), with its limit in use, and returns the instants at which the
// lane let out the 24 calls that replaced them and slow start added (3
// per answer).
func startRound(t *testing.T, c *Controller) []time.Time {
	t.Helper()
	var out []time.Time
	for i, l := range flat {
		now := t0.Add(secs(l)).Add(time.Duration(i) * time.Millisecond)
		c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(t0), InFlight: c.Limit(), Dispatched: t0}, now)
		out = append(out, now, now, now)
	}
	require.Equal(t, 24, c.Limit())
	return out
}

// The calls a slow start let out above its first level that are still
// out when that level's calls would all be back are slow already: the
// slow start ends at the next answer, on time as it may be, back to the
// level whose calls came back (a server that queues: each call beyond its
// knee takes longer, and the calls let out past it hold their slots until
// they answer). Calls that do come back in time end nothing, nor do calls
// out while the caller held some before sending them (Sample.Held).
func TestSlowStartEndsOnCallsOverdue(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	sent := startRound(t, c)
	last := sent[len(sent)-1]
	now := last.Add(secs(1.02)) // on time, but the 23 others are not back
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: c.Limit(), Dispatched: last}, now)
	assert.Equal(t, Decreased, ev)
	st := c.State()
	assert.Equal(t, 8, st.Limit, "back to the level whose calls came back")
	assert.Equal(t, Success, st.DecreaseCause, "a latency cut")

	back := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	sent = startRound(t, back)
	type call struct{ sent, back time.Time }
	calls := make([]call, len(sent))
	for i, at := range sent {
		calls[i] = call{at, at.Add(secs(flat[i%len(flat)]))}
	}
	slices.SortFunc(calls, func(a, b call) int { return a.back.Compare(b.back) })
	for i, x := range calls {
		ev := back.ObserveAt(Sample{Outcome: Success, Latency: x.back.Sub(x.sent), InFlight: back.Limit(), Dispatched: x.sent}, x.back)
		require.NotEqual(t, Decreased, ev, "call %d back in time", i)
	}
	assert.Greater(t, back.Limit(), 24, "the slow start goes on")

	shared := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	sent = startRound(t, shared)
	shared.Adopt(24, time.Time{}, 0) // a lane governed with other processes
	last = sent[len(sent)-1]
	now = last.Add(secs(1.02))
	ev = shared.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: shared.Limit(), Dispatched: last}, now)
	assert.NotEqual(t, Decreased, ev, "a shared limit: its calls in flight are this process's share, not counted")

	held := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	sent = startRound(t, held)
	last = sent[len(sent)-1]
	now = last.Add(secs(1.02))
	ev = held.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: held.Limit(), Dispatched: last, Held: true}, now)
	assert.NotEqual(t, Decreased, ev, "calls held by the caller for a request budget: their silence says nothing")

	off := New(Config{AdmissionWindow: -1, Max: 64, LatencyTolerance: -1}, t0)
	sent = startRound(t, off)
	last = sent[len(sent)-1]
	now = last.Add(secs(1.02))
	ev = off.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: off.Limit(), Dispatched: last}, now)
	assert.Equal(t, Increased, ev, "without the latency signal, silence says nothing")
}

// How many of the calls let out should be back by now depends on the
// lowest level's latency, known from its 8 calls: calls out for about
// its median are no verdict, since a mean fast by chance would expect
// half of them back. Long past it, the verdict comes.
func TestOverdueAllowsForTheLowestLevelsFewCalls(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	// The first 8 calls, let out as the lane started, answer at about
	// 2 s, having taken 0.6 to 1.6 s; each lets out 3 more calls.
	var last time.Time
	for i, l := range []float64{0.6, 1.6, 0.8, 1.25, 1, 0.7, 1.4, 1.1} {
		now := at(2).Add(time.Duration(i) * time.Millisecond)
		c.ObserveAt(Sample{Outcome: Success, Latency: secs(l), InFlight: c.Limit(), Dispatched: now.Add(-secs(l))}, now)
		last = now
	}
	require.Equal(t, 24, c.Limit())
	now := last.Add(secs(1.05))
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: c.Limit(), Dispatched: last}, now)
	assert.NotEqual(t, Decreased, ev, "23 calls out for about the median: no verdict")
	now = last.Add(secs(3))
	ev = c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(last), InFlight: c.Limit(), Dispatched: last}, now)
	assert.Equal(t, Decreased, ev, "out for 3 times the median, not one back: they are slow")
}

// The start files its calls under Initial, so against a knee below
// Initial every level the profile knows is past it. A lane that has cut
// on latency and runs at the lowest level it knows, where calls take 4
// times as long as those its start let out with at most 4 in flight (up
// to Initial/2),
// goes down to 4: the knee is below every level it knows.
func TestLatencyCutBelowTheLowestLevelToTheStartsFirstSteps(t *testing.T) {
	// run ramps a lane to 8, answers the 4 calls of its first steps in
	// about 1 s, puts it at 8 after a latency cut (seen) and answers up
	// to 32 calls sent under 8 that took f seconds, until a decrease; it
	// returns the last event and the limit.
	run := func(f float64, seen bool) (Event, int) {
		c := New(Config{Max: 64}, t0)
		for n := 1; n < 8; n++ {
			require.Equal(t, Increased, c.AdmitAt(c.Limit(), windows(0.5+0.5*float64(n))))
		}
		require.Equal(t, 8, c.Limit())
		for i, ms := range []float64{0, 4, 6, 8} { // let out under 1, 2, 3, 4
			sent := t0.Add(time.Duration(ms * float64(time.Millisecond)))
			c.ObserveAt(Sample{Outcome: Success, Latency: secs(flat[i]), Dispatched: sent}, sent.Add(secs(flat[i])))
		}
		c.mu.Lock()
		c.target, c.defaultRule.ss = 8, 8
		c.defaultRule.latencySeen = seen
		c.recordLimitLocked(at(2))
		c.mu.Unlock()
		var ev Event
		for i := range 4 {
			if ev, _ = answer(c, at(2+5*float64(i)), scaled(flat, f)...); ev == Decreased {
				break
			}
		}
		return ev, c.Limit()
	}
	ev, limit := run(4, true)
	assert.Equal(t, Decreased, ev)
	assert.Equal(t, 4, limit, "the level of the start's first steps")

	ev, limit = run(1, true)
	assert.NotEqual(t, Decreased, ev, "as fast as the first steps' calls: nothing below")
	assert.GreaterOrEqual(t, limit, 8)

	ev, _ = run(4, false)
	assert.NotEqual(t, Decreased, ev, "no latency cut yet: the lane's own start is still the reference")
}

// The answer that brings the last of the lowest level's calls back is
// one of that level's calls when the calls let out above it are judged:
// the verdict on them comes at that answer, with its latency in the
// level's mean and spread, not one answer later without it.
func TestOverdueCountsTheAnswerThatCompletesTheLowestLevel(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	for i, l := range flat[:7] { // 7 of the first 8 calls, each letting out 3
		now := t0.Add(secs(l)).Add(time.Duration(i) * time.Millisecond)
		require.NotEqual(t, Decreased, c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(t0), InFlight: c.Limit(), Dispatched: t0}, now))
	}
	require.Equal(t, 22, c.Limit())
	now := at(4) // the 8th; the 14 calls let out at about 1 s are not back
	ev := c.ObserveAt(Sample{Outcome: Success, Latency: secs(4), InFlight: c.Limit(), Dispatched: t0}, now)
	assert.Equal(t, Decreased, ev, "out 3 times as long as the lowest level's calls took, none back")
	assert.Equal(t, 8, c.Limit())
}
