package proxy

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/usage"
)

// callOptions are how one call is governed.
type callOptions struct {
	urgency        int
	maxRetries     int
	attemptTimeout time.Duration
	tenant         string // never empty: DefaultTenant for calls that name none
	// maxResponse bounds an answer read whole (see needsBuffering).
	maxResponse int64
	// answers, if set, is the budget that a successful answer read whole
	// takes its bytes from; one that does not fit is passed on as a
	// stream instead (see bufferAnswer).
	answers *bodyBudget
	// wholeStreams reads a streamed success whole inside its attempt too,
	// for a caller that takes the answer whole (a Call of Do): a stream
	// the provider cut, or ended with an error event, is then a failed
	// attempt, retried, as a cut JSON answer is (see overloadWatch).
	wholeStreams bool
	// client is the caller's connection, watched during the call so that
	// a caller who leaves takes the call out of the queue and cuts its
	// attempt in flight; nil for calls with no connection of their own
	// (a Call of Do, whose watch follows its context: see Proxy.Do).
	client net.Conn
	// onAttempt, if set, is told of each attempt before it is sent (see
	// Call.OnAttempt).
	onAttempt func(attempt int)
}

// callResult is what a governed round trip came to: an upstream answer to
// pass back (resp, owned by the receiver, with release to be called once
// it is written) or an error of Governor's own.
type callResult struct {
	resp *fasthttp.Response
	// lane is the lane whose slot the answer's attempt holds until
	// release; nil when none is held. (A method value such as q.Release
	// would cost an allocation per call.)
	lane    *lane.Lane
	attempt lane.Attempt // the attempt whose answer it is
	granted time.Time    // when the attempt's slot was granted; zero if at once
	sent    time.Time    // when the attempt was handed to its upstream connection
	tenant  string       // whose slot it is
	err     *apiError
	details Details
	// usage corrects the lane's token estimates with the usage of a
	// streamed answer, read as it passes; nil when the call was not
	// costed (no token budget known).
	usage *costCorrection
	// held is what the answer took from callOptions.answers, to give
	// back once it is written; partial is the start of an answer passed
	// on as a stream, read before the budget ran out (see bufferAnswer).
	held    int64
	partial []byte
	spilled bool // a success passed on as it arrives, not read whole
}

// costCorrection is what a streamed answer's usage corrects: the call's
// estimated cost, and the size of its body.
type costCorrection struct {
	cost      lane.Cost
	bodyBytes int
}

// observe corrects l's estimates with t, the usage reported at now.
func (cc *costCorrection) observe(l *lane.Lane, t usage.Tokens, now time.Time) {
	if cc != nil {
		l.ObserveUsage(cc.cost, cc.bodyBytes, t.Prompt, t.Completion, now)
	}
}

// release ends the answer's attempt and gives the lane's slot back, if
// the call holds one.
func (r *callResult) release() {
	if r.lane != nil {
		r.lane.Done(r.attempt)
		r.lane.Queue().ReleaseTenant(r.tenant)
	}
}

// A governedCall is one call under its lane's governance. Fill p, l, req
// and o, then run it; the outcome is in res.
//
// The caller keeps it in its own frame: a waiting call's state then costs
// no heap, and the frames on the stack while it waits stay small (see
// forward).
type governedCall struct {
	p   *Proxy
	l   *lane.Lane
	req upstreamRequest
	o   callOptions

	// watched is the watch of the call's client, for the whole call: of
	// its connection (o.client), made by run, or for a Call of Do, of its
	// context (see clientWatch.follow), made and ended by Do. From the
	// first wait on (see own), cancel ends the call's own context, and
	// timer ends a wait in the queue (see startWait).
	watched *watchedClient
	cancel  context.CancelCauseFunc
	timer   *time.Timer

	seq uint64 // the pacer's sequence number of the attempt
	// retry is what the call carries once an attempt has failed; nil
	// until then, which keeps the frame of a waiting call small (see
	// forward).
	retry *retrying
	// cost is the call's estimated token cost (set once the lane knows a
	// token budget; costed then), and mark its booking's; textBytes is
	// the size of its body that counts toward the cost (see textBytes).
	cost      lane.Cost
	costed    bool
	textBytes int
	mark      lane.TokenMark
	// granted is when the attempt's slot was granted: the limit it was
	// let out under is the one the controller had then (see
	// aimd.Sample.Dispatched).
	granted time.Time
	// res is the outcome: its details are kept up to date, the rest is
	// set when the call ends (try reports done, or giveUp).
	res callResult
}

// run sends c.req to c.l's upstream under the lane's governance: it waits
// in the lane's queue until the controller's limit lets it out, classifies
// the answer, feeds the outcome to the controller, and retries what a retry
// can fix, ahead of fresh calls, after the provider's hint or a jittered
// backoff, until the budget is spent (see retryBudget). A streamed answer
// is returned as soon as its headers arrive; it is never retried after
// that.
//
// It builds the upstream request from c.req when it first needs it, and
// releases it before it returns. Its frame stays on the stack while the
// call waits, so it only loops: each step is a method of its own.
//
// The client, if the call has one, is watched for the whole call: a client
// that leaves takes its call out of the queue and cuts its attempt in
// flight (see clientWatch). A Call of Do comes with a watch of its own.
func (c *governedCall) run(ctx context.Context) {
	defer c.end()
	if c.o.client != nil {
		c.watched = c.p.clients.watch(c.o.client, c.req.in.Body())
	}
	for attempt := 1; ; attempt++ {
		var e *apiError
		if ctx, e = c.acquire(ctx, attempt); e != nil {
			c.giveUp(ctx, e)
			return
		}
		if c.try(ctx, attempt) {
			return
		}
		ctx = c.own(ctx)
		if err := c.p.backoff(ctx, attempt, c.retry.hint, c.retry.freed); err != nil {
			c.giveUp(ctx, c.p.waitError(ctx, err))
			return
		}
	}
}

// own gives the call a context of its own the first time the call has to
// wait, and returns the context to use from then on: one that a queue
// timeout ends, and the client leaving, for a call that has a client (see
// clientWatch). A call let out at once pays for none of it.
func (c *governedCall) own(ctx context.Context) context.Context {
	switch {
	case c.cancel != nil: // owned already
	case c.o.client != nil:
		ctx, c.cancel = c.watched.context(ctx)
	default:
		ctx, c.cancel = context.WithCancelCause(ctx)
	}
	return ctx
}

// end ends the watch and what own started, and releases the upstream
// request.
func (c *governedCall) end() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.o.client != nil {
		c.p.clients.unwatch(c.watched)
	} else if c.cancel != nil {
		c.cancel(nil)
	}
	c.req.release()
}

// giveUp ends the call, setting c.res: to the provider's last answer when
// there is one and someone to read it, else to e (nil: the reason the
// call's context ended). The caller of Do reads its Result even once the
// Call's context has ended.
func (c *governedCall) giveUp(ctx context.Context, e *apiError) {
	c.res.details.Status = StatusFailed
	clientLeft := errors.Is(context.Cause(ctx), errClientLeft) || c.o.client != nil && c.watched.left()
	var last *fasthttp.Response
	if c.retry != nil {
		last, c.retry.last = c.retry.last, nil
	}
	if last != nil && !clientLeft {
		c.res.resp = last
		return
	}
	if last != nil {
		fasthttp.ReleaseResponse(last)
	}
	if e == nil {
		e = c.p.waitError(ctx, context.Cause(ctx))
	}
	// An error that says when to come back (queue full, draining) leaves
	// the client's SDK free to, after its Retry-After; any other is
	// final: Governor has already retried, or retrying cannot help.
	e.Final = e.RetryAfter == 0
	c.res.err = e
}

// try makes one attempt with the slot held. It reports done, with c.res
// set, when the call ends; otherwise the slot is given back and the call
// retries after c.retry.hint (or a backoff).
//
//go:noinline
func (c *governedCall) try(ctx context.Context, n int) (done bool) {
	a := upstreamAttempt{n: n}
	c.send(&a)
	c.read(&a)
	a.timing(c.p.cfg.Now())
	if c.watched != nil && c.watched.land() {
		c.clientLeft(ctx, &a)
		return true
	}
	c.observe(&a)
	switch {
	case a.err == nil && a.oc == lane.Answered || a.oc == lane.Quota:
		c.complete(&a)
		return true
	case a.err != nil && a.oc == lane.Answered: // response too large
		c.tooLarge(ctx, &a)
		return true
	}
	return c.failed(ctx, &a)
}
