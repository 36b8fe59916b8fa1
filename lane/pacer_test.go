package lane

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPacerSpacesDispatchesByTheReportedBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The pacer spends paceMargin of the rate it learns: waiting for the
	// missing share of a token takes missing / (rate · paceMargin).
	wait := func(missing, rate float64) time.Duration {
		return time.Duration(missing / (rate * paceMargin) * float64(time.Second))
	}
	var p pacer
	// No report yet: nothing is delayed.
	seq, d := p.reserve(t0)
	assert.Zero(t, d)
	// The answer to call 1 says: capacity 10, none left, full again in
	// 900ms. Remaining is rounded down, so the true count is in [0, 1) and
	// the rate in (9/0.9, 10/0.9]: the pacer takes the lower bound, 10/s.
	p.observe(Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond}, seq, t0, t0.Add(50*time.Millisecond))
	now := t0.Add(50 * time.Millisecond)
	refilled := 10 * paceMargin * 0.05 // tokens refilled in 50ms
	_, d = p.reserve(now)              // refilled tokens, less than one: wait
	assert.Equal(t, wait(1-refilled, 10), d)
	_, d = p.reserve(now) // one more call booked ahead of it
	assert.Equal(t, wait(2-refilled, 10), d)
	// A stale report (an earlier call's) changes nothing.
	p.observe(Budget{Limit: 10, Remaining: 10}, 0, t0, now)
	_, d = p.reserve(now)
	assert.Equal(t, wait(3-refilled, 10), d)
	// A newer report with a higher lower bound raises the rate: 5 left,
	// full in 250ms: rate in (16, 20].
	p.observe(Budget{Limit: 10, Remaining: 5, Reset: 250 * time.Millisecond}, 4, now, now)
	_, d = p.reserve(now) // 5 tokens left after call 4: go
	assert.Zero(t, d)
	// Tokens never exceed the capacity however long the lane was idle.
	_, d = p.reserve(t0.Add(time.Hour))
	assert.Zero(t, d)
}

// pacerStep is, at an instant, either an answer reporting a budget or a
// dispatch reserved, and what the pacer makes of it.
type pacerStep struct {
	at int // milliseconds after t0
	// An answer to dispatch seq, dispatched at sent, reports budget; the
	// pacer then holds rate (when not 0).
	budget *Budget
	seq    uint64
	sent   int
	rate   float64
	// Otherwise a dispatch is reserved, and waits this long.
	wait time.Duration
}

// Every case runs on explicit instants: what the pacer waits for, step by
// step, from the budgets it is told.
func TestPacerTable(t *testing.T) {
	// wait is the time to refill missing tokens at the learned rate, of
	// which the pacer spends paceMargin.
	wait := func(missing, rate float64) time.Duration {
		return time.Duration(missing / (rate * paceMargin) * float64(time.Second))
	}
	empty := &Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond} // rate in (10, 11.1]: 10
	for _, tc := range []struct {
		name   string
		maxGap time.Duration
		steps  []pacerStep
	}{
		{"no report: no wait", 0, []pacerStep{{at: 0}, {at: 0}, {at: 0}}},
		{"an empty bucket waits for its refill", 0, []pacerStep{
			{at: 0},
			{at: 50, budget: empty, seq: 1, sent: 0, rate: 10},
			{at: 50, wait: wait(1-10*paceMargin*0.05, 10)},
			{at: 50, wait: wait(2-10*paceMargin*0.05, 10)}}},
		{"tokens left: no wait", 0, []pacerStep{
			{at: 0},
			{at: 10, budget: &Budget{Limit: 10, Remaining: 5, Reset: 250 * time.Millisecond}, seq: 1, rate: 16},
			{at: 10}, {at: 10}, {at: 10}}},
		{"an invalid budget is ignored", 0, []pacerStep{
			{at: 0},
			{at: 10, budget: &Budget{Limit: math.NaN(), Remaining: 0, Reset: time.Second}, seq: 1},
			{at: 10, budget: &Budget{Limit: 10, Remaining: -1, Reset: time.Second}, seq: 1},
			{at: 10, budget: &Budget{Limit: math.Inf(1), Remaining: 0, Reset: time.Second}, seq: 1},
			{at: 10}, {at: 10}}},
		{"a stale report changes nothing", 0, []pacerStep{
			{at: 0}, {at: 0},
			{at: 50, budget: empty, seq: 2, sent: 0, rate: 10},
			{at: 50, budget: &Budget{Limit: 10, Remaining: 10}, seq: 1, sent: 0, rate: 10},
			{at: 50, wait: wait(1-10*paceMargin*0.05, 10)}}},
		{"a burst after a long idle spends the capacity, then waits", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 2, Remaining: 0, Reset: time.Second}, seq: 1, rate: 1},
			{at: 3_600_000}, {at: 3_600_000},
			{at: 3_600_000, wait: wait(1, 1)},
			{at: 3_600_000, wait: wait(2, 1)}}},
		{"a wait for one token is bounded by the largest gap", time.Second, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 1, Remaining: 0, Reset: 24 * time.Hour}, seq: 1},
			{at: 0, wait: time.Second},
			{at: 0, wait: 2 * time.Second}}},
		{"no wait exceeds maxDelay", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 1, Remaining: 0, Reset: 24 * time.Hour}, seq: 1},
			{at: 0, wait: maxDelay}}},
		{"the rate's lower bound stands for rateMemory, then follows the provider", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 10, Remaining: 0, Reset: 500 * time.Millisecond}, seq: 1, rate: 18},
			{at: 1000, budget: empty, seq: 1, rate: 10.0 / 0.9},
			{at: 1000 + int(rateMemory/time.Millisecond), budget: empty, seq: 1, rate: 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacer{maxGap: tc.maxGap}
			for i, st := range tc.steps {
				now := ms(st.at)
				if st.budget != nil {
					p.observe(*st.budget, st.seq, ms(st.sent), now)
					if st.rate != 0 {
						rate, _ := p.learned()
						assert.InDelta(t, st.rate, rate, 1e-9, "step %d: %+v", i, st)
					}
					continue
				}
				_, d := p.reserve(now)
				assert.Equal(t, st.wait, d, "step %d: %+v", i, st)
			}
		})
	}
}
