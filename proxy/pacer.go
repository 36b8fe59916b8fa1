package proxy

import (
	"bytes"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// pacer spaces a lane's dispatches by what the provider says of its request
// budget, so that a token-bucket limit is met by waiting in Governor rather
// than discovered through 429s.
//
// Providers report the bucket on every answer: OpenAI's
// x-ratelimit-limit-requests (capacity), x-ratelimit-remaining-requests and
// x-ratelimit-reset-requests (time until full), Anthropic's
// anthropic-ratelimit-requests-* (reset as an RFC 3339 time). From them the
// refill rate follows from limit, remaining and reset (see observe). The
// pacer keeps an estimate of
// the tokens left — the last report, minus the calls dispatched since the
// reported call, plus the refill since — and each dispatch reserves one: when
// none is left it waits for the next refill, like rate.Limiter.Reserve.
// With no headers the pacer never delays anything.
type pacer struct {
	mu         sync.Mutex
	rate       float64   // tokens per second; 0 = unknown, no pacing
	capacity   float64   // bucket size
	remaining  float64   // tokens left after the reported call
	reportedAt time.Time // when the reported call was dispatched
	reportSeq  uint64    // dispatch sequence number of the reported call
	seq        uint64    // dispatches reserved so far

	lowRate   float64   // the largest lower bound on the rate seen lately
	lowRateAt time.Time // when it was seen

	// maxGap bounds the wait for one token, as MaxPause bounds a
	// Retry-After: a budget that refills in hours, or a nonsense one,
	// cannot stall the lane. Zero: no bound. Set before the pacer is used.
	maxGap time.Duration
}

// paceMargin is the share of the provider's refill rate the pacer spends.
// A call reaches the provider some time after its dispatch, and that delay
// varies (scheduling, connection reuse), so dispatches spaced exactly at the
// refill rate arrive bunched now and then and find the bucket empty. Spending
// a little less lets the bucket keep a few tokens for that jitter.
const paceMargin = 0.95

// rateMemory is how long a lower bound on the refill rate stands, so that
// the pacer follows a provider whose rate changes.
const rateMemory = 10 * time.Second

// reserve books one dispatch at now and returns its sequence number and how
// long the call must wait before it is sent.
func (p *pacer) reserve(now time.Time) (uint64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	if !(p.rate > 0) || math.IsInf(p.rate, 0) {
		return p.seq, 0
	}
	rate := p.rate * paceMargin
	if p.maxGap > 0 {
		rate = max(rate, 1/p.maxGap.Seconds())
	}
	tokens := p.remaining - float64(p.seq-1-p.reportSeq) + rate*now.Sub(p.reportedAt).Seconds()
	tokens = min(tokens, p.capacity)
	if !(tokens < 1) {
		return p.seq, 0
	}
	// A refill rate read from nonsense can make the wait overflow a
	// Duration: no wait exceeds the longest hint Governor accepts.
	wait := min((1-tokens)/rate, maxHint.Seconds())
	return p.seq, time.Duration(wait * float64(time.Second))
}

// observe takes the budget an answer reports. seq and dispatched are those
// of the call that got the answer; reports older than the one held are
// ignored.
func (p *pacer) observe(h *fasthttp.ResponseHeader, seq uint64, dispatched, now time.Time) {
	limit, remaining, reset, ok := rateLimitHeaders(h, now)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq < p.reportSeq {
		return
	}
	// Providers round remaining down: the true count lies in
	// [remaining, remaining+1), so the refill rate lies in
	// ((limit-remaining-1)/reset, (limit-remaining)/reset]. The largest lower
	// bound seen lately converges on the true rate from below, which errs on
	// the side of fewer 429s; the upper bound serves until one exists.
	if reset > 0 && limit > remaining {
		secs := reset.Seconds()
		if low := (limit - remaining - 1) / secs; low > 0 && (low > p.lowRate || now.Sub(p.lowRateAt) > rateMemory) {
			p.lowRate, p.lowRateAt = low, now
		}
		p.rate = (limit - remaining) / secs
		if p.lowRate > 0 && now.Sub(p.lowRateAt) <= rateMemory {
			p.rate = min(p.rate, p.lowRate)
		}
	}
	p.capacity = limit
	p.remaining = remaining
	p.reportedAt = dispatched
	p.reportSeq = seq
}

// learned returns the refill rate and bucket size the pacer has learned,
// zero if none.
func (p *pacer) learned() (rate, capacity float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !(p.rate > 0) || math.IsInf(p.rate, 0) {
		return 0, 0
	}
	return p.rate, p.capacity
}

// budgetHeaders are the request-budget headers rateLimitHeaders reads:
// OpenAI's limit, remaining and reset, then Anthropic's.
var budgetHeaders = [6]string{
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset",
}

// peekBudget returns the values of budgetHeaders in h, each the first of
// its name, as Peek would: in one pass over the headers, where a Peek per
// name costs a pass each (and most answers have none of them).
func peekBudget(h *fasthttp.ResponseHeader) (v [len(budgetHeaders)][]byte) {
	var seen [len(budgetHeaders)]bool
	for k, val := range h.All() {
		if len(k) < len(budgetHeaders[0]) { // the shortest name
			continue
		}
		for i, name := range budgetHeaders {
			if !seen[i] && len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
				v[i], seen[i] = val, true
				break
			}
		}
	}
	return v
}

// rateLimitHeaders reads a provider's request budget from an answer.
func rateLimitHeaders(h *fasthttp.ResponseHeader, now time.Time) (limit, remaining float64, reset time.Duration, ok bool) {
	v := peekBudget(h)
	if l, r := v[0], v[1]; len(l) > 0 && len(r) > 0 {
		limit, err1 := strconv.ParseFloat(string(bytes.TrimSpace(l)), 64)
		remaining, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
		reset, err3 := time.ParseDuration(string(bytes.TrimSpace(v[2])))
		if err1 != nil || err2 != nil || !validBudget(limit, remaining) {
			return 0, 0, 0, false
		}
		if err3 != nil || reset < 0 {
			reset = 0
		}
		return limit, min(remaining, limit), min(reset, maxHint), true
	}
	if l, r := v[3], v[4]; len(l) > 0 && len(r) > 0 {
		limit, err1 := strconv.ParseFloat(string(bytes.TrimSpace(l)), 64)
		remaining, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
		if err1 != nil || err2 != nil || !validBudget(limit, remaining) {
			return 0, 0, 0, false
		}
		var reset time.Duration
		if t, err := time.Parse(time.RFC3339, string(bytes.TrimSpace(v[5]))); err == nil && t.After(now) {
			reset = min(t.Sub(now), maxHint)
		}
		return limit, min(remaining, limit), reset, true
	}
	return 0, 0, 0, false
}

// validBudget reports whether a reported limit and remaining count are
// numbers a budget can have (ParseFloat accepts NaN and Inf).
func validBudget(limit, remaining float64) bool {
	return limit > 0 && !math.IsInf(limit, 0) && remaining >= 0
}
