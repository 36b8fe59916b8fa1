package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/logtest"
)

// A lane's decrease is counted under what the refusal that brought it was
// for, as the provider's answer tells: a 529 (overloaded), a 429 whose
// message shows the token budget without room for the call, a 429 that
// names no budget (the account's concurrency or rate limit).
func TestDecreaseCauseFollowsTheRefusal(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		cause  string
		status int
		body   string
	}{
		{"overloaded", statusOverloaded, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{"token_budget", http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached for gpt-test in organization org-x on tokens per min (TPM): Limit 30000, Used 29800, Requested 750. Please try again in 1s.","type":"tokens","code":"rate_limit_exceeded"}}`},
		{"rate_limited", http.StatusTooManyRequests, `{"error":{"message":"Too many concurrent requests.","type":"rate_limit_error","code":"rate_limit_exceeded"}}`},
	} {
		t.Run(tc.cause, func(t *testing.T) {
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if calls.Add(1) > 1 {
					w.WriteHeader(tc.status)
					io.WriteString(w, tc.body)
					return
				}
				io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
			}))
			t.Cleanup(up.Close)
			set := newSet()
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Metrics: set}))
			c := client(t)
			status, err := postOnce(c, base, "first", 1000)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			status, err = postOnce(c, base, "refused", 1000)
			require.NoError(t, err)
			require.Equal(t, tc.status, status, "the provider's answer, no retries asked")

			li := lanesOf(t, c, base)[0]
			assert.Equal(t, tc.cause, li.LastDecreaseCause)
			assert.Equal(t, "rate_limited", li.LastDecreaseReason, "the controller's signal")
			for _, cause := range []string{"overloaded", "token_budget", "rate_limited"} {
				want := 0.0
				if cause == tc.cause {
					want = 1
				}
				assert.Equal(t, want, counterOf(t, set, fmt.Sprintf(`governor_lane_decreases_by_cause_total{lane=%q,cause=%q}`, li.ID, cause)), cause)
			}
		})
	}
}

// An operator whose provider is down reads why in the lane's warning,
// without the access log: the attempt's error, as a batch item's details
// have it.
func TestFailedAttemptLineSaysWhy(t *testing.T) {
	checkLeaks(t)
	var logs logtest.Buffer
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://127.0.0.1:1"),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))}))
	c := client(t)
	status, err := postOnce(c, base, "down", 10)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, status)
	assert.Equal(t, map[string]uint64{"connection_error": 1, "server_error": 0, "timeout": 0, "quota_exhausted": 0},
		lanesOf(t, c, base)[0].Failures, "the lanes view counts the failure")
	lines := logs.Lines(t, "upstream attempt failed")
	require.NotEmpty(t, lines, logs.String())
	assert.Equal(t, "connection_error", lines[0]["outcome"])
	assert.Contains(t, lines[0]["error"], "connection refused")
}
