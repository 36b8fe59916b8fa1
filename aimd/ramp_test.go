package aimd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ms returns t0 plus n milliseconds.
func ms(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }

// windows returns t0 plus n admission windows (DefaultAdmissionWindow).
func windows(n float64) time.Time { return t0.Add(time.Duration(n * float64(DefaultAdmissionWindow))) }

// refusedAt is a 429 answered at once to a call sent at sent.
func refusedAt(sent time.Time, inFlight int) Sample {
	return Sample{Outcome: RateLimited, Latency: time.Millisecond, InFlight: inFlight, Dispatched: sent}
}

// A lane starts with one call and adds one each time the calls it has
// out went unrefused for an admission window (the first step) or half of
// one (the later ones), up to Initial.
func TestRampAddsOneCallEachStep(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	require.Equal(t, 1, c.Limit(), "a lane starts with one call")
	due, ok := c.AdmitDue()
	require.True(t, ok)
	assert.Equal(t, windows(1), due)

	assert.Equal(t, None, c.AdmitAt(1, windows(0.9)), "too soon: a refusal may still come")
	assert.Equal(t, 1, c.Limit())
	assert.Equal(t, Increased, c.AdmitAt(1, windows(1)))
	assert.Equal(t, 2, c.Limit())
	due, _ = c.AdmitDue()
	assert.Equal(t, windows(1.5), due, "later steps wait half a window")
	assert.Equal(t, None, c.AdmitAt(2, windows(1.4)), "too soon")
	for want := 3; want <= 8; want++ {
		now := windows(1 + 0.5*float64(want-2))
		assert.Equal(t, Increased, c.AdmitAt(c.Limit(), now), "to %d", want)
		assert.Equal(t, want, c.Limit(), "one call more, never a step of several")
	}
	assert.Equal(t, windows(2.5), c.defaultRule.ramp.topAt, "the step above Initial/2")
	assert.Equal(t, 4, c.defaultRule.ramp.lowTop, "calls let out before it went out with at most 4 in flight")
	due, ok = c.AdmitDue()
	require.True(t, ok, "the last step's calls are not known admitted yet")
	assert.Equal(t, None, c.AdmitAt(8, due), "Initial calls are in")
	_, ok = c.AdmitDue()
	assert.False(t, ok, "the start is over")
	assert.Equal(t, 8, c.Limit(), "never above Initial from admissions")
	assert.Zero(t, c.State().Decreases)
}

// A window the lane does not fill tests nothing: no step.
func TestRampNeedsTheLimitInUse(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	c.AdmitAt(1, windows(1))
	require.Equal(t, 2, c.Limit())
	assert.Equal(t, None, c.AdmitAt(1, windows(2)), "one call out of two")
	assert.Equal(t, 2, c.Limit())
	assert.Equal(t, Increased, c.AdmitAt(2, windows(2.5)))
	assert.Equal(t, 3, c.Limit())
}

// Alone under a cap of 1: one call in, the second refused. The limit goes
// to 1 at once and the lane is no newcomer, where a start at 8 drew 7
// refusals, then Initial − 1 more every round trip until 8 calls had
// succeeded, and came down by ×0.9 per round trip.
func TestRampRefusalSetsTheLimitToWhatWasAdmitted(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	c.AdmitAt(1, windows(1))
	require.Equal(t, 2, c.Limit())
	ev := c.ObserveAt(refusedAt(windows(1), 2), windows(1.5))
	assert.Equal(t, Decreased, ev)
	st := c.State()
	assert.Equal(t, 1, st.Limit, "the provider holds one call of the lane")
	assert.Equal(t, 2.0, st.DecreaseLevel, "refused at 2")
	assert.False(t, c.defaultRule.newcomer(c.cfg), "the lane has as many calls in as the provider takes")
	_, ok := c.AdmitDue()
	assert.False(t, ok, "the ramp is over")

	// Its call succeeds and the next one is sent: no growth for a round
	// trip (the probe hold), then a probe of one more call, refused; the
	// refusal is an ordinary decrease, not a newcomer's free one.
	c.ObserveAt(Sample{Outcome: Success, Latency: 100 * time.Millisecond, InFlight: 1, Dispatched: ms(0)}, ms(100))
	assert.Equal(t, 1, c.Limit(), "an answer to a call sent before the refusal")
}

// Alone under a cap of 2, the ramp's third call is its only refusal: each
// step lets out one call more, so a step refused at its first call lets
// out no other to be refused too.
func TestRampStepsDrawOneRefusal(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	c.AdmitAt(1, windows(1))
	c.AdmitAt(2, windows(1.5))
	require.Equal(t, 3, c.Limit(), "one call more than the 2 admitted")
	assert.Equal(t, Decreased, c.ObserveAt(refusedAt(windows(1.5), 3), windows(1.6)))
	assert.Equal(t, 2, c.Limit(), "the provider holds 2 calls of the lane")
	assert.Equal(t, 3.0, c.State().DecreaseLevel, "refused at 3")
	_, ok := c.AdmitDue()
	assert.False(t, ok, "the ramp is over")
}

// Refusals slower than a step: calls of several steps are out when the
// first refusal comes, and each further refusal of a call let out before
// it takes one call off, down to what the provider holds.
func TestRampBurstCountsTheRefusals(t *testing.T) {
	slow := New(Config{Max: 64}, t0)
	slow.AdmitAt(1, windows(1))
	slow.AdmitAt(2, windows(1.5))
	slow.AdmitAt(3, windows(2))
	require.Equal(t, 4, slow.Limit())
	// A cap of 1: the calls let out at 1, 1.5 and 2 windows are refused,
	// the first refusal after the third step.
	assert.Equal(t, Decreased, slow.ObserveAt(refusedAt(windows(1), 4), windows(2.2)))
	assert.Equal(t, 3, slow.Limit(), "four out, one refused")
	assert.Equal(t, None, slow.ObserveAt(refusedAt(windows(1.5), 3), windows(2.3)))
	assert.Equal(t, None, slow.ObserveAt(refusedAt(windows(2), 2), windows(2.4)))
	assert.Equal(t, 1, slow.Limit(), "the provider holds one call of the lane")
	assert.Equal(t, uint64(1), slow.State().Decreases, "one decrease")
	slow.ObserveAt(Sample{Outcome: Success, Latency: time.Second, InFlight: 1, Dispatched: t0}, windows(100))
	assert.Equal(t, 1, slow.Limit(), "the first call was admitted")
}

// Refused before any call got in: the provider was full already (a lane
// joining others on a shared account). The lane asks as a newcomer, at
// Initial cut once, as when it started at Initial.
func TestRampRefusedWithNothingAdmittedIsANewcomer(t *testing.T) {
	ramped := New(Config{Max: 64}, t0)
	assert.Equal(t, Decreased, ramped.ObserveAt(refusedAt(ms(0), 1), windows(0.5)))
	direct := New(Config{Max: 64, AdmissionWindow: -1}, t0)
	direct.ObserveAt(refusedAt(ms(0), 8), windows(0.5))
	assert.Equal(t, direct.State(), ramped.State(), "the same state as a lane that started at Initial")
	assert.True(t, ramped.defaultRule.newcomer(ramped.cfg))
	assert.Equal(t, 7, ramped.Limit())
}

// A lane that got a call in at its start but was refused the next one
// looks like a lane alone under a small cap. If a later probe above it
// succeeds, others sharing the provider gave a slot back: it asks as a
// newcomer does, with Initial calls.
func TestRampCeilingThatGivesWayRejoinsAsANewcomer(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	c.AdmitAt(1, windows(1))
	c.ObserveAt(refusedAt(windows(1), 2), windows(1.5))
	require.Equal(t, 1, c.Limit())
	now := windows(1.5)
	for i := 0; c.Limit() < 2; i++ {
		require.Less(t, i, 20, "the lane probes within a few round trips")
		sent := now
		now = now.Add(100 * time.Millisecond)
		c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(sent), InFlight: c.Limit(), Dispatched: sent}, now)
	}
	// The probe (2 in flight) succeeds: capacity grew.
	sent := now
	now = now.Add(100 * time.Millisecond)
	c.ObserveAt(Sample{Outcome: Success, Latency: now.Sub(sent), InFlight: 2, Dispatched: sent}, now)
	assert.GreaterOrEqual(t, c.Limit(), 8, "asks at Initial again")
	assert.True(t, c.defaultRule.newcomer(c.cfg), "and its 429s do not cut it until Initial calls have succeeded")
}

// Successes during the ramp grow the limit as slow start does, and a
// lane whose ramp ran out without a refusal is an ordinary lane at
// Initial.
func TestRampThenSlowStart(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	for n := 1; n <= 8; n++ {
		c.AdmitAt(n, windows(0.5+0.5*float64(n)))
	}
	_, ok := c.AdmitDue()
	require.False(t, ok, "the start is over")
	assert.Equal(t, Increased, c.ObserveAt(Sample{Outcome: Success, Latency: 100 * time.Millisecond, InFlight: 8}, ms(100)))
	assert.Equal(t, 10, c.Limit(), "slow start: +2 per success")
}

// Phoenix and a negative window start at Initial; AdmitAt does nothing.
func TestRampOff(t *testing.T) {
	for _, cfg := range []Config{{Max: 64, AdmissionWindow: -1}, {Preset: Phoenix, Max: 64, Initial: 8}} {
		c := New(cfg, t0)
		assert.Equal(t, 8, c.Limit(), "%v", cfg.Preset)
		_, ok := c.AdmitDue()
		assert.False(t, ok)
		assert.Equal(t, None, c.AdmitAt(8, ms(100)))
		assert.Equal(t, 8, c.Limit())
	}
}

// Adopting a shared target ends the ramp: other Governors decide.
func TestRampEndsOnAdopt(t *testing.T) {
	c := New(Config{Max: 64}, t0)
	c.Adopt(12, time.Time{}, 0)
	_, ok := c.AdmitDue()
	assert.False(t, ok)
	assert.Equal(t, 12, c.Limit())
}

// A call answered before the ramp's first step (a provider that answers
// within the window) grows the limit as slow start does; a refusal after
// it finds a ceiling: the provider took a call of the lane. It lowers the
// limit to what was admitted, where taken for a provider full before the
// lane got anything in it raised it to Initial cut once (3 → 7).
func TestRampRefusalAfterAnAnswerFindsACeiling(t *testing.T) {
	for _, inFlight := range []int{1, 0} { // one call out; unknown
		c := New(Config{Max: 64}, t0)
		c.ObserveAt(Sample{Outcome: Success, Latency: time.Millisecond, InFlight: 1, Dispatched: t0}, ms(1))
		require.Equal(t, 3, c.Limit(), "slow start: +2")
		assert.Equal(t, Decreased, c.ObserveAt(refusedAt(ms(1), inFlight), ms(2)), "in flight %d", inFlight)
		assert.Equal(t, 1, c.Limit(), "the one call the provider took, in flight %d", inFlight)
		assert.False(t, c.defaultRule.newcomer(c.cfg), "in flight %d", inFlight)
	}
	// Three out: the provider held two when it refused the third.
	c := New(Config{Max: 64}, t0)
	c.ObserveAt(Sample{Outcome: Success, Latency: time.Millisecond, InFlight: 1, Dispatched: t0}, ms(1))
	assert.Equal(t, Decreased, c.ObserveAt(refusedAt(ms(1), 3), ms(2)))
	assert.Equal(t, 2, c.Limit())
}
