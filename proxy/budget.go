package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// budgetHeaders are the request-budget headers rateLimitHeaders reads:
// OpenAI's limit, remaining and reset, then Anthropic's.
var budgetHeaders = [6]string{
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset",
}

// peekBudget returns the values of budgetHeaders in h (see peekFirst).
func peekBudget(h *fasthttp.ResponseHeader) (v [len(budgetHeaders)][]byte) {
	peekFirst(h, budgetHeaders[:], v[:])
	return v
}

// peekFirst sets v[i] to the value of the first header of h named
// names[i], in any case, as Peek would, and leaves it nil when there is
// none: in one pass over the headers, where a Peek per name costs a pass
// each (and most answers have none of the rate-limit headers). v is as
// long as names, at most 64.
func peekFirst(h *fasthttp.ResponseHeader, names []string, v [][]byte) {
	var seen uint64 // bit i: names[i] was found
	shortest := len(names[0])
	for _, name := range names {
		shortest = min(shortest, len(name))
	}
	for k, val := range h.All() {
		if len(k) < shortest {
			continue
		}
		for i, name := range names {
			if seen&(1<<i) == 0 && len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
				v[i], seen = val, seen|1<<i
				break
			}
		}
	}
}

// rateLimitHeaders reads a provider's request budget from an answer, for
// the lane's pacer: OpenAI's x-ratelimit-{limit,remaining,reset}-requests,
// else Anthropic's anthropic-ratelimit-requests-* (reset as an RFC 3339
// time). ok is false when the answer has none, or a malformed one.
func rateLimitHeaders(h *fasthttp.ResponseHeader, now time.Time) (lane.Budget, bool) {
	v := peekBudget(h)
	if l, r := v[0], v[1]; len(l) > 0 && len(r) > 0 {
		limit, err1 := strconv.ParseFloat(string(bytes.TrimSpace(l)), 64)
		remaining, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
		reset, err3 := time.ParseDuration(string(bytes.TrimSpace(v[2])))
		if err1 != nil || err2 != nil || !(lane.Budget{Limit: limit, Remaining: remaining}).Valid() {
			return lane.Budget{}, false
		}
		if err3 != nil || reset < 0 {
			reset = 0
		}
		return lane.Budget{Limit: limit, Remaining: min(remaining, limit), Reset: min(reset, maxHint)}, true
	}
	if l, r := v[3], v[4]; len(l) > 0 && len(r) > 0 {
		limit, err1 := strconv.ParseFloat(string(bytes.TrimSpace(l)), 64)
		remaining, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
		if err1 != nil || err2 != nil || !(lane.Budget{Limit: limit, Remaining: remaining}).Valid() {
			return lane.Budget{}, false
		}
		var reset time.Duration
		if t, err := time.Parse(time.RFC3339, string(bytes.TrimSpace(v[5]))); err == nil && t.After(now) {
			reset = min(t.Sub(now), maxHint)
		}
		return lane.Budget{Limit: limit, Remaining: min(remaining, limit), Reset: reset}, true
	}
	return lane.Budget{}, false
}
