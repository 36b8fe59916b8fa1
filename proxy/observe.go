package proxy

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// observe counts the attempt and tells the lane what it learned: the
// provider's budgets from the answer's headers, and the outcome.
func (c *governedCall) observe(a *upstreamAttempt) {
	l, o, d, resp, err, oc := c.l, &c.o, &c.res.details, a.resp, a.err, a.oc
	// A 429 of an empty request budget, or of a token budget without
	// room for the call.
	emptyBudget, noTokens := false, false
	if err == nil {
		// A stream ended by an error was served all the same: the
		// provider spent its budget on it.
		emptyBudget, noTokens = c.observeBudgets(resp, a.served, a.sent, a.now)
		s := resp.StatusCode()
		c.l.ObserveCredential(s == fasthttp.StatusUnauthorized || s == fasthttp.StatusForbidden)
	}
	d.Attempts++
	d.Execution += a.latency
	d.StatusCode = 0
	if a.head {
		d.StatusCode = resp.StatusCode()
	}
	c.req.up.metrics.upstreamLatency.Update(a.latency.Seconds())
	exchange, now := a.exchange, a.now
	switch {
	case emptyBudget:
		l.ObserveEmptyBudget(c.seq, exchange, c.granted, now)
	case err == nil && resp.BodyStream() != nil:
		// An answer passed on as it arrives (an event or NDJSON stream,
		// one too large to hold): how it ends is its outcome, heard
		// once it has (see streamBody.outcome).
	case oc == lane.Answered:
		l.Observe(oc, exchange, c.granted, now)
	case oc != lane.RateLimited:
		// A failure: the lane's log line says what went wrong.
		var why string
		if a.streamWhy != "" { // a stream read whole: err is nil
			why = strconv.Itoa(resp.StatusCode()) + " " + a.streamWhy
		} else {
			why = attemptError(oc, resp.StatusCode(), bufferedBody(resp), err, o.attemptTimeout)
		}
		if oc == lane.Timeout && o.attemptTimeout < c.p.cfg.AttemptTimeout {
			l.ObserveCallerTimeout(why, exchange, c.granted, now)
		} else {
			l.ObserveFailure(oc, why, exchange, c.granted, now)
		}
	case err == nil && (resp.StatusCode() == statusOverloaded || a.streamWhy != ""):
		// A 529, or a stream read whole that overloaded_error ended.
		l.ObserveRefusal(lane.RefusedOverloaded, exchange, c.granted, now)
	case noTokens:
		l.ObserveRefusal(lane.RefusedTokenBudget, exchange, c.granted, now)
	default:
		l.ObserveRefusal(lane.RefusedLimit, exchange, c.granted, now)
	}
}

// observeBudgets gives the lane what an answer says of the provider's
// budgets: its request and token budget headers, the numbers of a 429 for
// a token budget (or, in a success without them, that such a budget held
// room for the call), and the usage of a successful answer read whole, which
// the lane's token counters add and which corrects the call's estimated
// cost. (A stream's usage is counted as it passes: see streamBody.) It
// reports whether the answer is a 429 that says the request budget held
// no call for it (emptyBudget), and whether it is a 429 whose report shows
// a token budget without room for the call (noTokens). sent is when the
// call was handed to its connection.
func (c *governedCall) observeBudgets(resp *fasthttp.Response, oc lane.Outcome, sent, now time.Time) (emptyBudget, noTokens bool) {
	l := c.l
	if b, ok := rateLimitHeaders(&resp.Header, now); ok {
		l.ObserveBudget(b, c.seq, sent, now)
		emptyBudget = resp.StatusCode() == fasthttp.StatusTooManyRequests && b.Remaining < 1
	}
	// The usage first: it corrects what the lane booked for this call,
	// which the budget the answer reports is then weighed against.
	if oc == lane.Answered {
		if t, ok := answerUsage(resp, c.p.cfg.MaxResponseBytes, &c.p.answers); ok {
			l.CountTokens(t)
			if c.costed {
				l.ObserveUsage(c.cost, c.textBytes, t.Prompt, t.Completion, now)
			}
		}
	}
	// A refused call cost the provider no tokens: its booking comes back
	// before the budget the refusal reports is weighed against it, and
	// its retry books again.
	if oc == lane.RateLimited || oc == lane.Quota {
		l.GiveBackTokens(c.cost, c.mark, now)
	}
	if oc == lane.Quota && c.costed && isTooLarge(bufferedBody(resp)) {
		// The budget has not grown past the call: its size refuses the
		// next such calls at once again, whether or not this answer
		// reports it.
		l.TokensTooLarge(c.cost, now)
	}
	reports, n := tokenBudgets(&resp.Header, now)
	for _, r := range reports[:n] {
		l.ObserveTokens(r, c.mark, sent, now)
		if oc == lane.RateLimited && l.TokensRefused(r, c.cost, c.mark, sent, now) {
			noTokens = true
		}
	}
	if n > 0 {
		return emptyBudget, noTokens
	}
	switch {
	case oc == lane.RateLimited:
		if r, ok := tokensFrom429(bufferedBody(resp)); ok {
			// Used counts the calls the provider took before this one,
			// not those booked after it: the mark subtracts them.
			l.ObserveTokens(r, c.mark, sent, now)
			l.TokensRefused(r, c.cost, c.mark, sent, now)
			// The message says the refusal is the token budget's.
			noTokens = true
		}
	case oc == lane.Answered && resp.StatusCode() < 300:
		// No report: a budget known only from 429 messages held room
		// for the call.
		l.TokensServed(c.mark, now)
	}
	return emptyBudget, noTokens
}
