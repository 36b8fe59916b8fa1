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

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
)

func TestRateLimitHeadersReadsAnthropicHeaders(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h fasthttp.ResponseHeader
	h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
	h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
	h.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(10*time.Second).Format(time.RFC3339))
	b, ok := rateLimitHeaders(&h, now)
	require.True(t, ok)
	assert.Equal(t, lane.Budget{Limit: 50, Remaining: 0, Reset: 10 * time.Second}, b)

	var bad fasthttp.ResponseHeader
	bad.Set("X-Ratelimit-Limit-Requests", "lots")
	bad.Set("X-Ratelimit-Remaining-Requests", "-3")
	_, ok = rateLimitHeaders(&bad, now)
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
	// Without pacing this run collects about 66 429s; with it, a few: the
	// first dispatches go out over connections still being dialled, whose
	// arrival at the provider the pacer cannot space, and a loaded machine
	// delays some dispatches into bunches. The bound tells the two apart
	// with room for both; the pacer's own arithmetic is checked on a fake
	// clock in package lane.
	assert.Less(t, st.RateLimited, int64(calls/2), "pacing keeps the bucket from running dry")
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
