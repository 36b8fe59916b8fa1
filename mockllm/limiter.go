package mockllm

import (
	"math"
	"sync"
	"time"
)

// limiter is the provider's capacity: a cap on requests served at once and a
// token bucket, whose settings follow a schedule. It has no goroutines: state
// advances lazily from the time passed in. Its lock is held only for a few
// arithmetic steps, never during a wait. It is safe for concurrent use.
type limiter struct {
	mu       sync.Mutex
	base     Limits  // the Config's limits, restored by restart
	schedule []Phase // ordered by At
	start    time.Time
	next     int // index of the first phase not yet applied
	cur      Limits
	tokens   float64
	last     time.Time // when tokens was last brought up to date
	inFlight int
	peak     int
	// budgets are the token budgets, indexed by budgetKind (requests
	// are the bucket above).
	budgets [budgetOutput + 1]tokenBudget
}

// admission is the verdict on one request.
type admission struct {
	ok bool
	// capFull is set when the concurrency cap refused the request.
	capFull bool
	// bucket is set when a token bucket is in force; the fields below are
	// meaningful only then.
	bucket    bool
	limit     int
	remaining int
	// full is the time until the bucket is full again.
	full time.Duration
	// next is the time until the next token, when there was none.
	next time.Duration
	// budgets are the token budgets' states, indexed by budgetKind, after
	// the request's charge (before it, for a refused request).
	budgets [budgetOutput + 1]budgetState
	// refusedBy is the token budget that refused the request, and
	// tooLarge is set when its cost exceeds the whole budget.
	refusedBy budgetKind
	tooLarge  bool
	requested int // the refused cost
	// inFlight counts the requests in flight, an admitted one included.
	inFlight int
}

func newLimiter(cfg Config, now time.Time) *limiter {
	l := &limiter{
		base:     Limits{MaxConcurrency: cfg.MaxConcurrency, Rate: cfg.Rate, Burst: cfg.Burst},
		schedule: sortedSchedule(cfg.Schedule),
	}
	window := cfg.TokenWindow
	if window == 0 {
		window = time.Minute
	}
	l.budgets[budgetTokens].perMinute = cfg.TokensPerMinute
	l.budgets[budgetInput].perMinute = cfg.InputTokensPerMinute
	l.budgets[budgetOutput].perMinute = cfg.OutputTokensPerMinute
	for k := range l.budgets {
		l.budgets[k].window = window
	}
	l.restartLocked(now)
	return l
}

// restart brings back the Config's limits, a full bucket and the schedule's
// first phase, counting offsets from now. Requests in flight stay counted.
func (l *limiter) restart(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.restartLocked(now)
	l.peak = l.inFlight
}

// restartLocked requires l.mu to be held.
func (l *limiter) restartLocked(now time.Time) {
	l.start = now
	l.next = 0
	l.cur = l.base
	l.tokens = float64(burstOf(l.cur))
	for i := range l.budgets {
		l.budgets[i].tokens = float64(l.budgets[i].perMinute)
	}
	l.last = now
	l.advanceLocked(now)
}

// burstOf is the effective bucket size of lim.
func burstOf(lim Limits) int {
	if lim.Burst > 0 {
		return lim.Burst
	}
	return max(1, int(lim.Rate))
}

// refillLocked brings the bucket up to date at t. It requires l.mu to be held.
func (l *limiter) refillLocked(t time.Time) {
	if !t.After(l.last) {
		return
	}
	if l.cur.Rate > 0 {
		l.tokens = min(float64(burstOf(l.cur)), l.tokens+l.cur.Rate*t.Sub(l.last).Seconds())
	}
	for i := range l.budgets {
		l.budgets[i].refill(t.Sub(l.last))
	}
	l.last = t
}

// advanceLocked applies the phases due at now and refills the bucket. It
// requires l.mu to be held.
func (l *limiter) advanceLocked(now time.Time) {
	for l.next < len(l.schedule) {
		p := l.schedule[l.next]
		at := l.start.Add(p.At)
		if now.Before(at) {
			break
		}
		l.refillLocked(at)
		hadBucket := l.cur.Rate > 0
		l.cur = Limits{MaxConcurrency: p.MaxConcurrency, Rate: p.Rate, Burst: p.Burst}
		if !hadBucket {
			l.tokens = float64(burstOf(l.cur))
		}
		l.tokens = min(l.tokens, float64(burstOf(l.cur)))
		l.next++
	}
	l.refillLocked(now)
}

// admit decides whether a request arriving at now, costing cost tokens,
// is served. An admitted request must be given back with release when its
// answer is finished.
func (l *limiter) admit(now time.Time, cost tokenCost) admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	var a admission
	if l.cur.Rate > 0 {
		a.bucket = true
		a.limit = burstOf(l.cur)
	}
	switch {
	case l.cur.MaxConcurrency > 0 && l.inFlight >= l.cur.MaxConcurrency:
		a.capFull = true
	case a.bucket && l.tokens < 1:
		a.next = ceilDuration((1 - l.tokens) / l.cur.Rate)
	case l.refuseTokensLocked(cost, &a):
	default:
		a.ok = true
		if a.bucket {
			l.tokens--
		}
		for k := range l.budgets {
			if l.budgets[k].on() {
				l.budgets[k].tokens -= float64(cost.of(budgetKind(k)))
			}
		}
		l.inFlight++
		l.peak = max(l.peak, l.inFlight)
	}
	for k := range l.budgets {
		if budgetKind(k) != a.refusedBy {
			a.budgets[k] = l.budgets[k].state(0)
		}
	}
	a.inFlight = l.inFlight
	if a.bucket {
		a.remaining = int(l.tokens)
		a.full = ceilDuration((float64(a.limit) - l.tokens) / l.cur.Rate)
	}
	return a
}

// refuseTokensLocked reports whether a token budget refuses cost, and
// which, in a. It requires l.mu to be held.
func (l *limiter) refuseTokensLocked(cost tokenCost, a *admission) bool {
	for k := budgetTokens; k <= budgetOutput; k++ {
		b := &l.budgets[k]
		c := cost.of(k)
		if !b.on() || float64(c) <= b.tokens {
			continue
		}
		a.refusedBy, a.tooLarge, a.requested = k, c > b.perMinute, c
		a.budgets[k] = b.state(c)
		return true
	}
	return false
}

// release gives back the place of an admitted request, and the output
// tokens it was charged but did not use.
func (l *limiter) release(unusedOutput int) {
	l.mu.Lock()
	l.inFlight--
	if b := &l.budgets[budgetOutput]; b.on() && unusedOutput > 0 {
		b.tokens = min(float64(b.perMinute), b.tokens+float64(unusedOutput))
	}
	l.mu.Unlock()
}

// snapshot returns the limits in force at now and the in-flight counts.
func (l *limiter) snapshot(now time.Time) (lim Limits, inFlight, peak int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	lim = l.cur
	if lim.Rate > 0 {
		lim.Burst = burstOf(lim)
	}
	return lim, l.inFlight, l.peak
}

// ceilDuration converts seconds to a duration rounded up to the millisecond.
func ceilDuration(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(seconds*1000-1e-9)) * time.Millisecond
}
