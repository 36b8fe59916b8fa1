package lane

import (
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
