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

// Valid reports whether b holds numbers a budget can have: a positive
// Limit up to MaxBudget, Remaining from 0, Reset from 0.
func (b Budget) Valid() bool {
	return b.Limit > 0 && b.Limit <= MaxBudget && b.Remaining >= 0 && b.Reset >= 0
}

// MaxBudget is the largest size of a budget, of requests or tokens, that
// a report may give: a thousand times the largest budgets providers set
// (OpenAI's 150 million tokens a minute, its 15 billion queued for its
// Batch API). A larger one is a gateway's stand-in for "unlimited" (the
// largest 64-bit integer) or garbage, and is ignored, as NaN is: its
// refill (what was used over the time to the reset, a millisecond
// perhaps, shown a minute) could overflow to +Inf, which neither GET
// /governor/lanes (JSON has no Inf) nor the pacers' counts can carry.
const MaxBudget = 1e15

// pacer spaces a lane's dispatches by what the provider says of its request
// budget, so that a token-bucket limit is met by waiting in Governor rather
// than discovered through 429s.
//
// The refill rate follows from a report's limit, remaining and reset (see
// observe). The pacer keeps its own count of the tokens left (the refill
// at that rate, less the calls it let out), and each dispatch reserves
// one: when none is left it waits for the next refill, like
// rate.Limiter.Reserve. Each report bounds the count by what the bucket
// can hold, the provider having counted the reported call at some instant
// between its dispatch and its answer (see bucket.bound). Of the bucket
// the pacer counts only its share, which others' spending, told by the
// refusals of its calls, makes smaller (see refused). With no report the
// pacer never delays anything.
type pacer struct {
	mu        sync.Mutex
	rate      float64 // tokens per second; 0 = unknown, no pacing
	count     bucket  // refilled at refillRate; kept once rate is known
	reportSeq uint64  // dispatch sequence number of the reported call
	seq       uint64  // dispatches reserved so far
	blindTo   uint64  // the last dispatch reserved before a rate was known

	// lows and ups keep the largest lower bound and the smallest upper
	// bound on the rate seen lately; reportAt is when the count last
	// took a report.
	lows, ups extreme
	reportAt  time.Time

	// share is the part of the bucket the pacer takes as its own (see
	// share): all of it from the first report (none before it); its
	// bookings are dispatches.
	share share

	// maxGap bounds the wait for one token, as MaxPause bounds a
	// Retry-After: a budget that refills in hours, or a nonsense one,
	// cannot stall the lane. Zero: no bound. Set before the pacer is used.
	maxGap time.Duration

	limit float64 // the bucket's size, as last reported
}

// paceMargin is the share of the provider's refill rate at which a call
// that finds no token left waits for one. A call reaches the provider some
// time after its dispatch, and that delay varies (scheduling, connection
// reuse), so dispatches spaced exactly at the refill rate arrive bunched
// now and then; spacing them a little wider lets the bucket keep a few
// tokens for that jitter. The count refills at the provider's rate: what
// the wider spacing left in the bucket goes to the calls after.
const paceMargin = 0.95

// rateMemory is how long a bound on the refill rate stands (from half of
// it to all of it: see extreme), so that the pacer follows a provider
// whose rate changes.
const rateMemory = 10 * time.Second

// extreme keeps the extreme (by pick: math.Max or math.Min) of the values
// added within the last rateMemory/2 to rateMemory: the extreme of its
// current half and the one before. Unlike an extreme held until it
// expires, it does not jump, at the expiry, to whatever value comes next:
// a bucket the lane keeps nearly full bounds its rate poorly (a count
// rounded down by one in a bucket that refills in a tenth of a second).
type extreme struct {
	cur, prev float64   // 0: none
	start     time.Time // of the current half
}

func (m *extreme) roll(now time.Time) {
	half := rateMemory / 2
	switch d := now.Sub(m.start); {
	case d >= 2*half:
		m.cur, m.prev, m.start = 0, 0, now
	case d >= half:
		m.cur, m.prev, m.start = 0, m.cur, m.start.Add(half)
	}
}

// of returns pick(a, b), or the one that is not 0.
func of(pick func(a, b float64) float64, a, b float64) float64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return pick(a, b)
}

func (m *extreme) add(v float64, now time.Time, pick func(a, b float64) float64) {
	m.roll(now)
	m.cur = of(pick, m.cur, v)
}

// get returns the extreme of the values added lately, 0 if none.
func (m *extreme) get(now time.Time, pick func(a, b float64) float64) float64 {
	m.roll(now)
	return of(pick, m.cur, m.prev)
}

// pacing reports whether the pacer knows a refill rate to pace by. It
// requires p.mu to be held.
func (p *pacer) pacing() bool { return p.rate > 0 && !math.IsInf(p.rate, 0) }

// refillRate is the rate the count refills at, and spaceRate the rate
// that waits for a token are spaced at (paceMargin of it): the refill
// rate, but at least one token each maxGap. They require p.mu to be held.
func (p *pacer) refillRate() float64 { return p.atLeastOneAGap(p.rate * p.share.of) }
func (p *pacer) spaceRate() float64  { return p.atLeastOneAGap(p.rate * p.share.of * paceMargin) }

func (p *pacer) atLeastOneAGap(rate float64) float64 {
	if p.maxGap > 0 {
		rate = max(rate, 1/p.maxGap.Seconds())
	}
	return rate
}

// reserve books one dispatch at now and returns its sequence number and how
// long the call must wait before it is sent.
func (p *pacer) reserve(now time.Time) (uint64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	if !p.pacing() {
		p.blindTo = p.seq
		return p.seq, 0
	}
	// The count refills up to the bucket's capacity, however long the
	// lane was idle: a burst after that spends the capacity, then waits.
	tokens := p.count.take(1, now)
	if !(tokens < 1) {
		return p.seq, 0
	}
	// A refill rate read from nonsense can make the wait overflow a
	// Duration: no wait exceeds maxDelay.
	wait := min((1-tokens)/p.spaceRate(), maxDelay.Seconds())
	return p.seq, time.Duration(wait * float64(time.Second))
}

// behind returns how much longer dispatch seq, reserved with a wait, must
// wait at now. A booking is a place in the line of the count, not an
// instant: the call goes once the count, with the calls booked after it
// taken back, holds its token. A wait said at the booking holds while the
// count refills as it was expected to; a share cut since (see refused) or
// a report of a bucket lower than the count moves the call back, so that
// the calls booked at the old share go out at the new one instead of
// spending what it no longer holds. The caller asks once the wait it was
// told is over: a call never goes earlier than that.
func (p *pacer) behind(seq uint64, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq <= p.blindTo || !p.pacing() || seq > p.seq {
		return 0
	}
	missing := -(p.count.level(now) + float64(p.seq-seq))
	if !(missing > 0) {
		return 0
	}
	wait := min(missing/p.spaceRate(), maxDelay.Seconds())
	return time.Duration(wait * float64(time.Second))
}

// refused takes a refusal at now, for an empty bucket, of dispatch seq,
// sent at sent: unless the pacer let it out blind, or it was sent before
// the share was last cut, the share is cut (see share).
func (p *pacer) refused(seq uint64, sent, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq <= p.blindTo || !p.pacing() || !p.share.cut(sent, now) {
		return
	}
	p.count.resize(p.share.of*p.limit, p.refillRate(), now)
}

// blind reports whether dispatch seq was let out before the pacer knew a
// refill rate: nothing it knew could have held the call back.
func (p *pacer) blind(seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return seq <= p.blindTo
}

// maxDelay bounds any wait the pacer asks for: the longest hint Governor
// accepts from a provider.
const maxDelay = 24 * time.Hour

// observe takes the budget an answer reports at now. seq and dispatched are
// those of the call that got the answer; reports older than the one held,
// and invalid ones, are ignored. What the report says was left, less the
// calls dispatched since, bounds the pacer's count between the report
// dated at the dispatch and dated at the answer (see bucket.bound); the
// first report once a rate is known sets it, as of the answer.
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
	counting := p.pacing() // the count has booked every dispatch since
	// Providers round remaining down: the true count lies in
	// [remaining, remaining+1), so the refill rate lies in
	// ((limit-remaining-1)/reset, (limit-remaining)/reset]. The largest lower
	// bound seen lately converges on the true rate from below, which errs on
	// the side of fewer 429s; the upper bound serves until one exists.
	if reset > 0 && limit > remaining {
		secs := reset.Seconds()
		if low := (limit - remaining - 1) / secs; low > 0 {
			p.lows.add(low, now, math.Max)
		}
		p.rate = (limit - remaining) / secs
		p.ups.add(p.rate, now, math.Min)
		if low := p.lows.get(now, math.Max); low > 0 {
			p.rate = min(p.rate, low)
		}
	}
	p.reportSeq = seq
	p.limit = limit
	if !counting {
		// No count yet: the report as of its answer, which credits no
		// refill that did not happen.
		p.share.start(now)
		p.count = bucket{capacity: limit, rate: p.refillRate(), tokens: remaining - float64(p.seq-seq), at: now}
		p.reportAt = now
		return
	}
	// The count so far refilled at the share it had; the report is read
	// with the share it has now.
	p.count.take(0, now)
	p.share.grow(now, remaining >= 1)
	left := p.share.of*remaining - float64(p.seq-seq)
	// The count is the pacer's own, so the report may be dated as early
	// as the provider can have counted the call, its dispatch: that
	// reading credits too much only when the count is higher still.
	//
	// The count refills at the rate's lower bound: it can have missed,
	// since the last report, the refill at the rate's upper bound less
	// that, which this report may give back (within its own bounds).
	if up := p.ups.get(now, math.Min); up > p.rate && now.After(p.reportAt) {
		p.count.take(-(up-p.rate)*p.share.of*now.Sub(p.reportAt).Seconds(), now)
	}
	p.reportAt = now
	p.count.bound(left, dispatched, now, p.share.of*limit, p.refillRate())
}

// RequestBudgetInfo is the provider's request budget as GET /governor/lanes
// shows it, once the lane paces by it: the refill rate a minute, the
// bucket's size, the share of both the lane takes as its own (1 unless
// its calls were refused for an empty bucket, as when other Governors or
// clients spend the same one; see pacer), and the estimate of what is left
// of that share now.
type RequestBudgetInfo struct {
	PerMinute float64 `json:"per_minute"`
	Burst     float64 `json:"burst"`
	Share     float64 `json:"share"`
	Remaining float64 `json:"remaining"`
}

// info describes the budget the pacer paces by at now; nil before it
// knows a refill rate.
func (p *pacer) info(now time.Time) *RequestBudgetInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pacing() {
		return nil
	}
	return &RequestBudgetInfo{PerMinute: p.rate * 60, Burst: p.limit, Share: p.share.of, Remaining: max(0, math.Floor(p.count.level(now)))}
}

// learned returns at now the refill rate and bucket size the pacer has
// learned, zero if none. The rate is a lower bound on the provider's (the
// pacer's rate, while a report lately gave one: see observe), which a
// coordinated lane publishes: the Governors' shared bucket refills at the
// largest of theirs.
func (p *pacer) learned(now time.Time) (rate, capacity float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pacing() || !(p.lows.get(now, math.Max) > 0) {
		return 0, 0
	}
	return p.rate, p.limit
}
