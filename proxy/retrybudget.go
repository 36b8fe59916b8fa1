package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// retrying is what a call carries once one of its attempts has failed.
type retrying struct {
	budget retryBudget
	last   *fasthttp.Response // the previous failed answer, returned if we give up
	hint   time.Duration      // the provider's wait before the next attempt, 0 for none
	// freed, after a 429, is closed when a call of the lane next
	// succeeds: the retry need not wait out the rest of hint (or the
	// backoff) then. Nil after any other failure.
	freed <-chan struct{}
}

// retryBudget is what a call's failed attempts have cost it.
//
// Every failed attempt costs the call one retry, except a 429 (or 529)
// that the lane's own calls caused: one refused while the provider was
// serving the lane's other calls (see lane.Lane.Contended). Under a
// concurrency cap the lane sometimes lets out more calls than the provider
// has slots (its limit probes above the cap, or a pause lifts when a call
// succeeds), and each extra call meets a 429 at once, while a slot frees
// only when a call ends: a budget spent on those would fail calls that
// never failed, but lost the race for a slot the lane holds. Such a call
// waits for its turn again, ahead of fresh calls, and the controller, which
// hears every 429, is what answers the contention.
//
// A 429 that came back while another call of the lane was in flight is
// pending: the provider may be serving that call, or refusing it too. It
// is forgiven once a call of the lane is answered successfully, and
// charged once every call that was in flight then has ended with none
// answered: a provider that refuses everybody spends the budget as before
// (a call with others in flight finds out one attempt later).
//
// A call waits for its turn this way for the queue timeout at most, from
// its first 429 that was not charged; after that every failed attempt
// costs a retry, so that no call is retried for ever. A call with no
// retries at all (a budget of 0) is never retried. DESIGN.md says why this
// rule and not a simpler one.
type retryBudget struct {
	spent   int32 // failed attempts charged
	pending int32 // 429s neither charged nor forgiven yet
	// first is the lane's mark at the dispatch of the first pending 429,
	// last at the latest one's answer.
	first, last lane.Mark
	since       time.Time // the call's first 429 not charged; zero if none yet
}

// fail accounts for the failed attempt a of a call in lane l, which came to
// oc at now, and reports whether the call has spent its max retries. turn
// bounds how long a call waits for its turn across 429s (see retryBudget).
// Call it before l.Done(a).
func (b *retryBudget) fail(l *lane.Lane, a lane.Attempt, oc lane.Outcome, now time.Time, turn time.Duration, max int) (spent bool) {
	if b.pending > 0 {
		switch {
		case l.ServedSince(b.first):
			b.pending = 0 // the lane was being served: those calls lost a race
		case !l.InFlightUpTo(b.last):
			b.spent += b.pending // all ended, none answered: refused
			b.pending = 0
		}
	}
	if oc == lane.RateLimited && max > 0 && (b.since.IsZero() || now.Sub(b.since) < turn) {
		switch {
		case l.ServedSince(lane.Mark(a)):
			b.wait(now)
			return int(b.spent) > max
		case l.Contended(a):
			b.wait(now)
			if b.pending == 0 {
				b.first = lane.Mark(a)
			}
			b.pending++
			b.last = l.Mark()
			return int(b.spent) > max
		}
	}
	b.spent++
	return int(b.spent) > max
}

// wait notes that the call waits for its turn from now, if it was not
// already waiting.
func (b *retryBudget) wait(now time.Time) {
	if b.since.IsZero() {
		b.since = now
	}
}
