package lane

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// LimitedBy names what holds a lane's waiting calls back, the most
// specific cause first.
func TestLimitedBy(t *testing.T) {
	paused := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tokensLeft := []TokenBudgetInfo{{Kind: "tokens", PerMinute: 3000, Remaining: 500}}
	tokensOut := []TokenBudgetInfo{{Kind: "tokens", PerMinute: 3000, Remaining: -741}}
	requestsOut := &RequestBudgetInfo{PerMinute: 60, Remaining: 0}
	cases := []struct {
		name      string
		li        Info
		connWaits int
		want      string
	}{
		{"nothing waits", Info{Limit: 4, InFlight: 4}, 0, ""},
		{"the limit is full", Info{Limit: 4, InFlight: 4, Queued: 3}, 0, LimitedByLimit},
		{"room under the limit", Info{Limit: 4, InFlight: 2, Queued: 1}, 0, ""},
		{"paused", Info{Limit: 4, InFlight: 0, Queued: 3, PausedUntil: &paused}, 0, LimitedByPause},
		{"connections", Info{Limit: 8, InFlight: 2, Queued: 3, ConnLimited: true}, 0, LimitedByConnections},
		{"held for tokens", Info{Limit: 8, InFlight: 8, Held: 6, TokenBudgets: tokensOut}, 0, LimitedByTokenBudget},
		{"held for requests", Info{Limit: 8, InFlight: 8, Held: 6, TokenBudgets: tokensLeft, RequestBudget: requestsOut}, 0, LimitedByRequestBudget},
		{"held, both out: tokens first", Info{Limit: 8, InFlight: 8, Held: 6, TokenBudgets: tokensOut, RequestBudget: requestsOut}, 0, LimitedByTokenBudget},
		{"held, no budget known but requests", Info{Limit: 8, InFlight: 8, Held: 1}, 0, LimitedByRequestBudget},
		{"in flight, waiting for connections, none queued", Info{Limit: 8, InFlight: 8, ConnLimited: true}, 6, LimitedByConnections},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, limitedBy(&c.li, c.connWaits), c.name)
	}
}
