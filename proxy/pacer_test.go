package proxy

import (
	"bufio"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/mockllm"
)

func budget(limit, remaining, reset string) *fasthttp.ResponseHeader {
	var h fasthttp.ResponseHeader
	h.Set("X-Ratelimit-Limit-Requests", limit)
	h.Set("X-Ratelimit-Remaining-Requests", remaining)
	h.Set("X-Ratelimit-Reset-Requests", reset)
	return &h
}

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
	p.observe(budget("10", "0", "900ms"), seq, t0, t0.Add(50*time.Millisecond))
	now := t0.Add(50 * time.Millisecond)
	refilled := 10 * paceMargin * 0.05 // tokens refilled in 50ms
	_, d = p.reserve(now)              // refilled tokens, less than one: wait
	assert.Equal(t, wait(1-refilled, 10), d)
	_, d = p.reserve(now) // one more call booked ahead of it
	assert.Equal(t, wait(2-refilled, 10), d)
	// A stale report (an earlier call's) changes nothing.
	p.observe(budget("10", "10", "0s"), 0, t0, now)
	_, d = p.reserve(now)
	assert.Equal(t, wait(3-refilled, 10), d)
	// A newer report with a higher lower bound raises the rate: 5 left,
	// full in 250ms: rate in (16, 20].
	p.observe(budget("10", "5", "250ms"), 4, now, now)
	_, d = p.reserve(now) // 5 tokens left after call 4: go
	assert.Zero(t, d)
	// Tokens never exceed the capacity however long the lane was idle.
	_, d = p.reserve(t0.Add(time.Hour))
	assert.Zero(t, d)
}

func TestPacerReadsAnthropicHeaders(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h fasthttp.ResponseHeader
	h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
	h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
	h.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(10*time.Second).Format(time.RFC3339))
	limit, remaining, reset, ok := rateLimitHeaders(&h, now)
	require.True(t, ok)
	assert.Equal(t, 50.0, limit)
	assert.Equal(t, 0.0, remaining)
	assert.Equal(t, 10*time.Second, reset)

	var bad fasthttp.ResponseHeader
	bad.Set("X-Ratelimit-Limit-Requests", "lots")
	bad.Set("X-Ratelimit-Remaining-Requests", "-3")
	_, _, _, ok = rateLimitHeaders(&bad, now)
	assert.False(t, ok, "malformed budgets are ignored")
}

// Against a token bucket, Governor learns the pace from the provider's
// headers and waits instead of collecting 429s.
func TestTokenBucketIsMetByPacing(t *testing.T) {
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Rate: 40, Burst: 4, Latency: 5 * time.Millisecond})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxPause: 50 * time.Millisecond}))
	c := client(t)
	// One call first, so the lane has seen the budget.
	resp, _ := chat(t, c, base, nil)
	require.Equal(t, 200, resp.StatusCode)

	const calls = 60
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			resp, _ := chat(t, c, base, nil)
			assert.Equal(t, 200, resp.StatusCode)
		})
	}
	wg.Wait()
	st := mock.Stats()
	t.Logf("429s: %d for %d calls", st.RateLimited, calls+1)
	// Without pacing this run collects about 66 429s. With it, a few at
	// most: the first dispatches go out over connections still being
	// dialled, whose arrival at the provider the pacer cannot space.
	assert.LessOrEqual(t, st.RateLimited, int64(10), "pacing keeps the bucket from running dry")
}

// peekBudget reads in one pass what a Peek per name would: the first value
// of each budget header, whatever the case of its name as received.
func TestPeekBudgetIsPeek(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-ratelimit-limit-requests: 100\r\n" +
		"X-RateLimit-Limit-Requests: 200\r\nx-ratelimit-remaining-requests:\r\nX-Ratelimit-Remaining-Requests: 5\r\n" +
		"anthropic-ratelimit-requests-reset: 2026-01-01T00:00:01Z\r\nX-Other: 1\r\n\r\n"
	var h fasthttp.ResponseHeader
	require.NoError(t, h.Read(bufio.NewReader(strings.NewReader(raw))))
	got := peekBudget(&h)
	for i, name := range budgetHeaders {
		assert.Equal(t, string(h.Peek(name)), string(got[i]), name)
	}
	assert.Equal(t, "100", string(got[0]))
	assert.Empty(t, got[1], "the first X-Ratelimit-Remaining-Requests is empty")
}
