package aimd

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// baseline feeds c a cohort of 8 calls dispatched together at t0 that
// took 1 s each, with the lane's limit in flight: the latency baseline.
// It returns the instant of the last answer.
func baseline(t *testing.T, c *Controller) time.Time {
	t.Helper()
	var now time.Time
	for i := range 8 {
		now = at(1 + float64(i)*0.001)
		c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(t0), InFlight: c.Limit(), Dispatched: t0}, now)
	}
	require.True(t, c.defaultRule.lat.based, "eight answers of one cohort make the baseline")
	assert.InDelta(t, 0, c.defaultRule.lat.logBase, 0.01, "the log of 1 s")
	return now
}

// A heavy tail puts a very fast call in a cohort now and then, and the
// fastest-call baseline may lie far below the calls the lane sends later.
// Answers at the lane's usual latency still grow the limit: whether one
// answer was slowed by queueing is read against the calls of the lowest
// level and their spread, not against the fastest call. A lane without
// the latency signal grows on any success.
func TestSlowSuccessIsJudgedAgainstTheLowestLevel(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	// The start's 8 calls, σ 0.8-like: one took 37 ms.
	answer(c, t0, 0.037, 0.3, 0.4, 0.45, 0.5, 0.6, 0.9, 1.2)
	require.True(t, c.defaultRule.lat.based)
	require.InDelta(t, 0.037, math.Exp(c.defaultRule.lat.logBase), 0.001, "the baseline is the cohort's fastest call")
	before := c.Limit()
	sent := at(1.3)
	answer(c, sent, 0.35, 0.5, 0.55, 0.7, 0.8, 1.1)
	assert.Equal(t, before+12, c.Limit(), "answers of 0.35 to 1.1 s grow a slow start whose calls take 0.04 to 1.2 s")

	steady := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	_, now := answer(steady, t0, flat...)
	ceiling(t, steady, now.Add(time.Millisecond))
	before = steady.Limit()
	steady.ObserveAt(Sample{Outcome: Success, Latency: secs(6), InFlight: before, Dispatched: now.Add(secs(0.1))}, now.Add(secs(6.1)))
	assert.Equal(t, before, steady.Limit(), "6 s where calls take 1 s: no growth")

	off := New(Config{AdmissionWindow: -1, Max: 64, LatencyTolerance: -1}, t0)
	before = off.Limit()
	for i := range 9 {
		off.ObserveAt(Sample{Outcome: Success, Latency: secs(6), InFlight: off.Limit(), Dispatched: at(float64(i))}, at(float64(i)+6))
	}
	assert.Greater(t, off.Limit(), before, "without the latency signal, slow answers grow the limit")
}

// A timeout while the lane's latency has exploded collapses the lane,
// though calls still succeed; a timeout at the usual latency is one
// decrease.
func TestTimeoutWhileLatencyExplodedCollapses(t *testing.T) {
	usual := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	now := baseline(t, usual)
	ev := usual.ObserveAt(Sample{Outcome: Timeout, Latency: secs(10), InFlight: 8, Dispatched: now.Add(-secs(10)).Add(time.Millisecond)}, now.Add(time.Millisecond))
	assert.Equal(t, Decreased, ev, "usual latency: an ordinary decrease")

	c := New(Config{AdmissionWindow: -1, Max: 64}, t0)
	now = baseline(t, c)
	ceiling(t, c, at(1.5)) // a slow start that a rise does not end
	// A cohort sent at 2 s, whose fastest call took 5 s: five times the
	// baseline.
	sent := at(2)
	for i := range 8 {
		now = sent.Add(secs(5 + float64(i)*0.01))
		c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(sent), InFlight: c.Limit(), Dispatched: sent}, now)
	}
	require.InDelta(t, 5, c.defaultRule.lat.last, 0.01)
	ev = c.ObserveAt(Sample{Outcome: Timeout, Latency: now.Sub(sent), InFlight: c.Limit(), Dispatched: sent}, now)
	assert.Equal(t, Collapsed, ev)
	st := c.State()
	assert.Equal(t, 1, st.Limit)
	assert.Equal(t, Timeout, st.DecreaseCause)
	assert.True(t, st.Collapsed)
}

// Latency that rises at a level no higher than the baseline's is not the
// lane's doing: it becomes the new baseline.
func TestSlowerAtTheSameLevelIsTheNewNormal(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 8}, t0) // Max 8: the lane stays at the baseline's level
	now := baseline(t, c)
	sent := now
	for i := range 8 {
		now = sent.Add(secs(3 + float64(i)*0.01))
		c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(sent), InFlight: 8, Dispatched: sent}, now)
	}
	assert.InDelta(t, 3, c.defaultRule.lat.last, 0.01)
	assert.InDelta(t, math.Log(3), c.defaultRule.lat.logBase, 0.01, "3 s is the usual now")
}

// The knee and output-length scenarios of the simulation, over seeds: the
// latency signal takes the lane to 0.75 of the throughput of running at
// the knee at least against servers that queue past a knee of 4, 8 or 32
// (about 0.25, 0.27 and 0.50 without it), cuts their timeouts by 5 at
// least, more than doubles the goodput when output lengths vary too, and
// costs nothing where latency varies 5x from output length alone, nor
// against hard caps. (Figures in DESIGN.md.)
func TestSimulationLatencySignal(t *testing.T) {
	const seeds = 5
	run := func(tol float64, p func(uint64) simParams) (goodput, timeoutsPer100 float64) {
		cfg := simConfig(Default)
		cfg.LatencyTolerance = tol
		for seed := uint64(1); seed <= seeds; seed++ {
			r := simulate(cfg, p(seed))
			goodput += r.Goodput / seeds
			timeoutsPer100 += 100 * float64(r.Timeouts) / float64(p(seed).Calls) / seeds
		}
		return goodput, timeoutsPer100
	}
	for _, sc := range matrixScenarios() {
		switch sc.name {
		case "knee 4 σ0.2", "knee 8 σ0.2", "knee 32 σ0.2", "knee 8 mix", "cap 16 mix", "cap 64 mix", "cap 64 σ0.4", "s3 σ0.2":
		default:
			continue // TestLatencyMatrix runs them all
		}
		oldG, oldT := run(-1, sc.p)
		newG, newT := run(0, sc.p)
		t.Logf("%-14s goodput %.3f -> %.3f, timeouts/100 %.1f -> %.1f", sc.name, oldG, newG, oldT, newT)
		switch sc.name {
		case "knee 4 σ0.2", "knee 8 σ0.2", "knee 32 σ0.2":
			assert.GreaterOrEqual(t, newG, 0.75, sc.name)
			assert.LessOrEqual(t, newT, oldT/5, sc.name)
		case "knee 8 mix":
			assert.GreaterOrEqual(t, newG, 2*oldG, sc.name)
			assert.LessOrEqual(t, newT, oldT/5, sc.name)
		default:
			assert.GreaterOrEqual(t, newG, oldG-0.001, "%s: no loss", sc.name)
		}
	}
}
