package proxy

import (
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/lane"
)

func budgetLane(t *testing.T) *lane.Lane {
	t.Helper()
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 8}, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return l
}

// The rules of retryBudget, attempt by attempt, at explicit instants.
func TestRetryBudgetRules(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	const turn = time.Minute
	// refuse makes one attempt of the call b in l that draws a 429 at now.
	refuse := func(l *lane.Lane, b *retryBudget, max int, now time.Time) bool {
		a := l.Dispatch()
		spent := b.fail(l, a, lane.RateLimited, now, turn, max)
		l.Done(a)
		return spent
	}

	t.Run("alone, every 429 is charged", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		for i := range 3 {
			assert.False(t, refuse(l, b, 3, t0), "429 %d", i+1)
		}
		assert.True(t, refuse(l, b, 3, t0), "the fourth spends a budget of 3")
	})

	t.Run("while another call holds the slot, nothing is charged", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		for round := range 3 {
			holder := l.Dispatch()
			for i := range 5 {
				assert.False(t, refuse(l, b, 1, t0), "round %d, 429 %d", round, i)
			}
			l.Answered(t0)
			l.Done(holder)
		}
		assert.Zero(t, b.spent)
		assert.False(t, refuse(l, b, 1, t0), "alone again, the budget counts: 1 of 1")
		assert.True(t, refuse(l, b, 1, t0), "2 of 1")
	})

	t.Run("a holder that fails too: its pending 429s are charged late", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		holder := l.Dispatch()
		assert.False(t, refuse(l, b, 2, t0), "pending: the holder may be served")
		assert.False(t, refuse(l, b, 2, t0))
		l.Done(holder) // refused as well: nothing was answered
		assert.True(t, refuse(l, b, 2, t0), "the two pending and this one: 3 > 2")
	})

	t.Run("other failures are charged whatever is in flight", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		holder := l.Dispatch()
		defer l.Done(holder)
		a := l.Dispatch()
		assert.False(t, b.fail(l, a, lane.ServerError, t0, turn, 1))
		l.Done(a)
		a = l.Dispatch()
		assert.True(t, b.fail(l, a, lane.Timeout, t0, turn, 1))
		l.Done(a)
	})

	t.Run("a budget of 0 is one attempt", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		holder := l.Dispatch()
		defer l.Done(holder)
		assert.True(t, refuse(l, b, 0, t0))
	})

	t.Run("the wait for a turn ends after turn", func(t *testing.T) {
		l, b := budgetLane(t), &retryBudget{}
		holder := l.Dispatch()
		defer l.Done(holder)
		for i := range 100 {
			assert.False(t, refuse(l, b, 2, t0.Add(time.Duration(i)*time.Second/2)), "429 %d", i)
		}
		late := t0.Add(turn)
		assert.False(t, refuse(l, b, 2, late))
		assert.False(t, refuse(l, b, 2, late))
		assert.True(t, refuse(l, b, 2, late), "past turn the budget counts again")
	})
}
