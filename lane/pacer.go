package lane

import (
	"math"
	"sync"
	"time"
)

// Budget is a provider's request budget as an answer reports it: a bucket
// of Limit dispatches, Remaining of them left after the call answered,
// full again Reset later. Providers report it on every answer: OpenAI's
// x-ratelimit-{limit,remaining,reset}-requests, Anthropic's
// anthropic-ratelimit-requests-{limit,remaining,reset}.
type Budget struct {
	Limit     float64
	Remaining float64
	Reset     time.Duration // 0 if unknown
}

// Valid reports whether b holds numbers a budget can have: a positive,
// finite Limit, Remaining from 0, Reset from 0.
func (b Budget) Valid() bool {
	return b.Limit > 0 && !math.IsInf(b.Limit, 0) && b.Remaining >= 0 && b.Reset >= 0
}

// pacer spaces a lane's dispatches by what the provider says of its request
// budget, so that a token-bucket limit is met by waiting in Governor rather
// than discovered through 429s.
//
// The refill rate follows from a report's limit, remaining and reset (see
// observe). The pacer keeps an estimate of the tokens left — the last
// report, minus the calls dispatched since the reported call, plus the
// refill since, never more than the bucket holds — and each dispatch
// reserves one: when none is left it waits for the next refill, like
// rate.Limiter.Reserve. With no report the pacer never delays anything.
type pacer struct {
	mu        sync.Mutex
	rate      float64   // tokens per second; 0 = unknown, no pacing
	capacity  float64   // bucket size
	tokens    float64   // the estimate of the tokens left at tokensAt (below 0: owed)
	tokensAt  time.Time // when tokens was last brought up to date
	reportSeq uint64    // dispatch sequence number of the reported call
	seq       uint64    // dispatches reserved so far

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
	if d := now.Sub(p.tokensAt); d > 0 {
		// The bucket refills up to its capacity, however long the lane
		// was idle: a burst after that spends the capacity, then waits.
		p.tokens = min(p.capacity, p.tokens+rate*d.Seconds())
		p.tokensAt = now
	}
	tokens := p.tokens
	p.tokens--
	if !(tokens < 1) {
		return p.seq, 0
	}
	// A refill rate read from nonsense can make the wait overflow a
	// Duration: no wait exceeds maxDelay.
	wait := min((1-tokens)/rate, maxDelay.Seconds())
	return p.seq, time.Duration(wait * float64(time.Second))
}

// maxDelay bounds any wait the pacer asks for: the longest hint Governor
// accepts from a provider.
const maxDelay = 24 * time.Hour

// observe takes the budget an answer reports. seq and dispatched are those
// of the call that got the answer; reports older than the one held, and
// invalid ones, are ignored.
func (p *pacer) observe(b Budget, seq uint64, dispatched, now time.Time) {
	if !b.Valid() {
		return
	}
	limit, remaining, reset := b.Limit, min(b.Remaining, b.Limit), min(b.Reset, maxDelay)
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
	// Left after the reported call, less the calls dispatched since, as
	// of its dispatch: reserve adds the refill since.
	p.tokens = remaining - float64(p.seq-seq)
	p.tokensAt = dispatched
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
