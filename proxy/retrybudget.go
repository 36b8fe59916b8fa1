package proxy

import (
	"context"
	"fmt"
	"strconv"
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

// failed accounts for a failed attempt: it notes the provider's hint
// (and pauses the lane for a 429's), charges the retry budget and gives
// the slot back. It reports done, having given up, when the budget is
// spent, the call's context has ended or Governor has shut down;
// otherwise the call retries.
func (c *governedCall) failed(ctx context.Context, a *upstreamAttempt) (done bool) {
	p, l, o, d := c.p, c.l, &c.o, &c.res.details
	resp, err, oc, now := a.resp, a.err, a.oc, a.now
	if a.streamWhy != "" {
		d.Errors = append(d.Errors, strconv.Itoa(resp.StatusCode())+" "+a.streamWhy)
	} else {
		d.Errors = append(d.Errors, attemptError(oc, resp.StatusCode(), bufferedBody(resp), err, o.attemptTimeout))
	}
	if c.retry == nil {
		c.retry = new(retrying)
	}
	r := c.retry
	r.hint, r.freed = 0, nil
	if err == nil {
		r.hint = min(retryAfter(&resp.Header, now), p.cfg.MaxPause)
		if oc == lane.RateLimited && r.hint > 0 {
			l.Pause(now.Add(r.hint), now)
		}
	}
	if oc == lane.RateLimited {
		r.freed = l.NextSuccess()
	}
	charged := oc
	if a.streamWhy != "" {
		// Served, then given up on: not a call that lost the race for
		// a slot (see retryBudget), so it costs a retry.
		charged = lane.ServerError
	}
	spent := r.budget.fail(l, a.at, charged, now, p.cfg.QueueTimeout, o.maxRetries)
	l.Done(a.at)
	l.Queue().ReleaseTenant(c.o.tenant)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
	} else {
		if r.last != nil {
			fasthttp.ReleaseResponse(r.last)
		}
		r.last = resp
	}
	if p.ctx.Err() != nil && err != nil {
		// Cut at the end of a drain (resp is already released).
		c.giveUp(ctx, &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining,
			Message: "Governor shut down before the provider answered"})
		return true
	}
	if spent || ctx.Err() != nil {
		if err != nil {
			e := upstreamError(c.req.up, err)
			c.giveUp(ctx, &e)
		} else {
			c.giveUp(ctx, nil)
		}
		return true
	}
	l.CountRetry(oc)
	return false
}

// maxRetriesOf reads X-Governor-Max-Retries: absent means def; anything
// but a whole number from 0 to MaxRetriesCeiling is an error, as the same
// option of a batch is: a budget the client did not mean would run its call
// with retries it did not ask for, or none.
func maxRetriesOf(v []byte, def int) (int, error) {
	if len(v) == 0 {
		return def, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 || n > MaxRetriesCeiling {
		return 0, fmt.Errorf("%s: want a whole number of retries from 0 to %d, got %q", HeaderMaxRetries, MaxRetriesCeiling, v)
	}
	return n, nil
}
