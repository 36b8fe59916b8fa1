package proxy

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
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

// emptyBucketUpstream is a provider whose every answer reports a request
// bucket of size calls, refilled in 1 s and empty after the call; seen
// counts the calls it got.
func emptyBucketUpstream(t *testing.T, size int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	seen := new(atomic.Int64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("X-Ratelimit-Limit-Requests", strconv.Itoa(size))
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("X-Ratelimit-Reset-Requests", "1s")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x"}`)
	}))
	t.Cleanup(up.Close)
	return up, seen
}

// Against a token bucket, Governor learns the pace from the provider's
// headers and holds a call for the refill it needs instead of sending it
// into a 429.
//
// Governor's clock stands still, so the only wait a call reports
// (X-Governor-Queue-Ms) is the pacer's, computed from the reported budget;
// however late a loaded machine runs the calls, that wait is the same.
// How many 429s pacing saves against a real bucket is a figure of a whole
// run: govbench's S2 measures it. The pacer's arithmetic over time is
// checked on a fake clock in package lane.
func TestTokenBucketIsMetByPacing(t *testing.T) {
	checkLeaks(t)
	// A bucket of 20 that refills in 1 s: 20 calls a second, and it is
	// empty after each call.
	up, seen := emptyBucketUpstream(t, 20)
	clock := newManualClock()
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: clock.Now, Metrics: set}))
	c := client(t)

	queueMs := func() int {
		t.Helper()
		resp, _ := chat(t, c, base, nil)
		require.Equal(t, 200, resp.StatusCode)
		ms, err := strconv.Atoi(resp.Header.Get(HeaderQueueMs))
		require.NoError(t, err)
		return ms
	}
	assert.Zero(t, queueMs(), "no budget known: the first call goes at once")
	var waitedMs int
	for i := range 3 {
		// Each answer says the bucket is empty: the next call waits for
		// one refill at 20/s, 50 ms, or a little more (the pacer spends a
		// little less than the provider's rate), and never two.
		ms := queueMs()
		waitedMs += ms
		assert.GreaterOrEqual(t, ms, 50, "call %d waits for the refill", i+2)
		assert.Less(t, ms, 100, "call %d waits for one refill", i+2)
	}
	assert.Equal(t, int64(4), seen.Load(), "no call was sent before its wait")

	// The lane's wait metrics say what the callers were told: four waits
	// adding up to their X-Governor-Queue-Ms, three of them for the budget.
	id := lanesOf(t, c, base)[0].ID
	for _, name := range []string{"governor_queue_wait_seconds", "governor_lane_budget_wait_seconds"} {
		count, sum := histogramOf(t, set, name, id)
		if name == "governor_queue_wait_seconds" {
			assert.Equal(t, 4, count, name)
		} else {
			assert.Equal(t, 3, count, name)
		}
		assert.InDelta(t, float64(waitedMs)/1000, sum, 0.004, "%s: the waits the calls reported", name)
	}
	b := lanesOf(t, c, base)[0].RequestBudget
	require.NotNil(t, b, "the lane shows the budget it paces by")
	// 19 to 20 a second: providers round remaining down, and the lane
	// paces by the rate's lower bound.
	assert.InDelta(t, 1170, b.PerMinute, 30)
	assert.Equal(t, 20.0, b.Burst)
	assert.Equal(t, 1.0, b.Share, "alone on the budget, never refused")
	assert.GreaterOrEqual(t, b.Remaining, 0.0)
}

// A call that waits for the provider's budget holds its slot: it counts in
// the lane's in_flight and in held until it is sent, and held is 0 again
// once it is.
func TestCallWaitingForTheBudgetIsHeld(t *testing.T) {
	checkLeaks(t)
	up, _ := emptyBucketUpstream(t, 1) // refills in 1 s, empty after each call
	clock := newManualClock()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: clock.Now}))
	c := client(t)
	resp, _ := chat(t, c, base, nil) // learns the budget: the next call waits 1 s
	require.Equal(t, 200, resp.StatusCode)
	require.Zero(t, lanesOf(t, c, base)[0].Held)

	done := make(chan int)
	go func() {
		resp, _ := chat(t, c, base, nil)
		done <- resp.StatusCode
	}()
	var li lane.Info
	require.Eventually(t, func() bool { li = lanesOf(t, c, base)[0]; return li.Held == 1 }, 5*time.Second, time.Millisecond,
		"the call waiting for the refill is held")
	assert.Equal(t, 1, li.InFlight, "held in its slot")
	assert.Equal(t, lane.LimitedByRequestBudget, li.LimitedBy, "what holds the lane back")
	assert.Equal(t, 200, <-done)
	li = lanesOf(t, c, base)[0]
	assert.Zero(t, li.Held, "sent and answered: no longer held")
	assert.Zero(t, li.InFlight)
}

// Against mockllm's token bucket every call of a burst succeeds, each
// attempt Governor reports reaching the provider once.
func TestTokenBucketBurstSucceeds(t *testing.T) {
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Rate: 40, Burst: 4, Latency: 5 * time.Millisecond})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxPause: 50 * time.Millisecond}))
	c := client(t)

	const calls = 60
	var wg sync.WaitGroup
	var attempts atomic.Int64
	for range calls {
		wg.Go(func() {
			resp, _ := chat(t, c, base, nil)
			assert.Equal(t, 200, resp.StatusCode)
			n, err := strconv.Atoi(resp.Header.Get(HeaderAttempts))
			assert.NoError(t, err)
			attempts.Add(int64(n))
		})
	}
	wg.Wait()
	st := mock.Stats()
	t.Logf("429s: %d for %d calls", st.RateLimited, calls)
	assert.Equal(t, int64(calls), st.Answered[200])
	assert.Equal(t, attempts.Load(), st.Answered[200]+st.RateLimited, "the provider saw each attempt Governor reported")
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

// So does it for the token budget headers (tokenBudgets).
func TestPeekFirstIsPeekForTokenHeaders(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nx-ratelimit-limit-tokens:\r\nX-Ratelimit-Limit-Tokens: 3000\r\n" +
		"anthropic-ratelimit-input-tokens-limit: 40000\r\nANTHROPIC-RATELIMIT-INPUT-TOKENS-REMAINING: 39000\r\n" +
		"Anthropic-Ratelimit-Input-Tokens-Remaining: 1\r\nX-Ratelimit-Remaining-Tokens: 2900\r\n\r\n"
	var h fasthttp.ResponseHeader
	require.NoError(t, h.Read(bufio.NewReader(strings.NewReader(raw))))
	var got [len(tokenHeaderNames)][]byte
	peekFirst(&h, tokenHeaderNames[:], got[:])
	for i, name := range tokenHeaderNames {
		assert.Equal(t, string(h.Peek(name)), string(got[i]), name)
	}
	assert.Empty(t, got[0], "the first X-Ratelimit-Limit-Tokens is empty")
	assert.Equal(t, "39000", string(got[4]))
}

// A 429 whose own request budget report says the budget was empty, to a
// call let out before any answer told the lane that budget, is the
// pacer's to meet (the report makes the next calls wait for the refill):
// the lane's concurrency limit stays where it was, as when a bucket
// smaller than the lane's starting limit is emptied by the first calls.
// The same 429 to a call the pacer let out knowing the budget (its count
// was wrong: others spend the budget too), and a 429 that reports no
// empty request budget (a concurrency cap), lower the limit.
func TestEmptyRequestBudget429LeavesTheConcurrencyLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		remaining string // of the 429; "" = no request budget headers
		known     bool   // an answer told the budget before the refused call
		lowered   bool
	}{
		{"request budget empty", "0", false, false},
		{"request budget empty, known to the pacer", "0", true, true},
		{"request budget not empty", "3", false, true},
		{"no request budget", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			refused := int64(1) // the attempt answered 429
			if tc.known {
				refused = 2
			}
			var seen atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := seen.Add(1)
				if tc.remaining != "" {
					// A bucket of 7 that refills in 1 s.
					w.Header().Set("X-Ratelimit-Limit-Requests", "7")
					w.Header().Set("X-Ratelimit-Remaining-Requests", map[bool]string{true: tc.remaining, false: "6"}[n == refused])
					w.Header().Set("X-Ratelimit-Reset-Requests", "1s")
				}
				w.Header().Set("Content-Type", "application/json")
				if n == refused {
					w.WriteHeader(http.StatusTooManyRequests)
					io.WriteString(w, `{"error":{"message":"rate limit reached","type":"requests"}}`)
					return
				}
				io.WriteString(w, `{"id":"x"}`)
			}))
			t.Cleanup(up.Close)
			clock := newManualClock()
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: clock.Now}))
			c := client(t)

			if tc.known {
				resp, _ := chat(t, c, base, nil)
				require.Equal(t, 200, resp.StatusCode)
			}
			resp, _ := chat(t, c, base, nil)
			require.Equal(t, 200, resp.StatusCode, "the retry succeeds")
			require.Equal(t, "2", resp.Header.Get(HeaderAttempts))
			li := lanesOf(t, c, base)[0]
			assert.EqualValues(t, 1, li.RateLimited)
			if tc.lowered {
				assert.EqualValues(t, 1, li.Decreases, "the 429 lowered the limit")
				assert.Equal(t, "rate_limited", li.LastDecreaseReason)
			} else {
				assert.Zero(t, li.Decreases, "the 429 left the limit")
			}
		})
	}
}
