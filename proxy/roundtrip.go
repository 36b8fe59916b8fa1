package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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

// An upstreamAttempt is one try of a call: what was sent, when, and what came
// back, as try's steps fill it in.
type upstreamAttempt struct {
	n    int                // the call's attempts so far, this one included
	at   lane.Attempt       // the lane's record of the attempt in flight
	resp *fasthttp.Response // the answer, or what is left of it
	err  error              // why there is no answer, or no whole one

	// oc is the outcome the lane hears; served what the answer's status
	// says, which differs from oc for a stream read whole that an error
	// event ended or that was cut (streamWhy then says which).
	oc, served lane.Outcome
	streamWhy  string
	// head reports whether the answer's head was read: its status is
	// the provider's, even when its body was then cut.
	head bool

	// start is the dispatch, deadline the end of the attempt's time, sent
	// the hand-over of the request to a connection, now the end of the
	// attempt; latency runs from start, exchange from sent (see timing).
	start, deadline, sent, now time.Time
	latency, exchange          time.Duration
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

// send dispatches the attempt and sends its request upstream.
func (c *governedCall) send(a *upstreamAttempt) {
	p, l, o := c.p, c.l, &c.o
	out := c.req.get()
	a.resp = fasthttp.AcquireResponse()
	if c.watched != nil {
		c.watched.carryBody(out, a.resp)
	}
	if o.onAttempt != nil {
		o.onAttempt(a.n)
	}
	a.at = l.Dispatch()
	a.start = p.cfg.Now()
	// An attempt that finds every connection to the upstream taken waits
	// for one in its slot, as if held there (see lane.WaitConn) until its
	// request is handed to a connection.
	waits := l.ConnsTaken()
	carried := c.watched != nil && c.watched.resp == a.resp
	if waits {
		l.WaitConn(a.start)
		if carried {
			c.watched.handed = l.GotConn
		}
	}
	a.deadline = a.start.Add(o.attemptTimeout)
	a.err = c.req.up.send(out, a.resp, a.deadline, c.watched)
	if waits && (!carried || c.watched.handed != nil) {
		// Never handed to a connection, or not carried (not told when).
		if carried {
			c.watched.handed = nil
		}
		l.GotConn(p.cfg.Now())
	}
}

// read reads what the attempt got, whole when it must be (see
// needsBuffering), and classifies it into a.oc and a.served.
func (c *governedCall) read(a *upstreamAttempt) {
	p, o, resp := c.p, &c.o, a.resp
	oc := lane.Answered
	err := a.err
	a.head = err == nil
	// events reads a stream read whole as it arrives (see bufferStream).
	var events overloadWatch
	scanned := false
	if err != nil {
		err = unsent(resp, scrubHeadError(err))
		oc = classifyErr(err)
	} else if needsBuffering(resp) || o.wholeStreams {
		// Read the body inside the attempt: a body cut short is a
		// connection error to retry, and a 429's body says whether it
		// is final.
		switch {
		case o.answers != nil && resp.StatusCode() < 400:
			c.res.held, c.res.partial, c.res.spilled, err = bufferAnswer(resp, o.maxResponse, o.answers)
		case needsBuffering(resp):
			err = bufferBody(resp, o.maxResponse)
		default:
			err = bufferStream(resp, o.maxResponse, p.cfg.StreamIdleTimeout, &events)
			scanned = true
		}
		if err != nil {
			oc = classifyErr(err)
			if errors.Is(err, errResponseTooLarge) {
				oc = lane.Answered // retrying gets the same; passed back cut as a Governor error
			}
			if oc == lane.Timeout && !needsBuffering(resp) {
				// Silent once begun, not slow to answer: retried as
				// a cut, no congestion signal, as for a stream
				// passed on.
				oc, a.streamWhy = lane.ConnError, "stream silent for "+p.cfg.StreamIdleTimeout.String()
			}
		}
	}
	if err == nil {
		oc = classifyStatus(resp.StatusCode(), bufferedBody(resp))
	}
	// served is what the answer's status says; oc, for a stream read
	// whole, what its events add (an error that ended it, a cut).
	served := oc
	if err == nil && oc == lane.Answered && o.wholeStreams && streamCountsTokens(resp) && resp.BodyStream() == nil {
		if !scanned { // read whole by another reader
			events.write(resp.Body())
		}
		events.write(lineEnd) // the last line, if the stream did not end it
		oc, a.streamWhy = events.outcome()
	}
	a.err, a.oc, a.served = err, oc, served
}

// timing sets the end of the attempt and its durations. latency runs
// from dispatch: the attempt's share of the call's execution and of the
// route's histogram. The lane hears exchange, from the request's
// hand-over to a connection: a wait for a free connection to the
// upstream, or the opening of one, is not the provider's, and read as its
// latency it would cut the limit of a lane that MaxConnsPerUpstream holds
// back.
func (a *upstreamAttempt) timing(now time.Time) {
	a.now = now
	a.latency, a.sent = now.Sub(a.start), a.start
	if t, ok := handedAt(a.resp); ok && t.After(a.start) {
		a.sent = t
	}
	a.exchange = now.Sub(a.sent)
}

// clientLeft ends the call whose attempt was cut because its client left:
// the provider did nothing wrong, so the controller does not hear of it,
// and nobody is left to retry for.
func (c *governedCall) clientLeft(ctx context.Context, a *upstreamAttempt) {
	l, o, d := c.l, &c.o, &c.res.details
	fasthttp.ReleaseResponse(a.resp) // closes the connection of an answer not read whole
	if o.answers != nil {
		o.answers.give(c.res.held)
		c.res.held, c.res.partial, c.res.spilled = 0, nil, false
	}
	l.Observe(lane.ClientGone, a.exchange, c.granted, a.now)
	l.Done(a.at)
	l.Queue().ReleaseTenant(c.o.tenant)
	d.Attempts++
	d.Execution += a.latency
	e, why := c.cutError(ctx)
	d.Errors = append(d.Errors, attemptError(lane.ClientGone, 0, nil, why, 0))
	c.giveUp(ctx, e)
}

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
		l.ObserveFailure(oc, why, exchange, c.granted, now)
	case err == nil && (resp.StatusCode() == statusOverloaded || a.streamWhy != ""):
		// A 529, or a stream read whole that overloaded_error ended.
		l.ObserveRefusal(lane.RefusedOverloaded, exchange, c.granted, now)
	case noTokens:
		l.ObserveRefusal(lane.RefusedTokenBudget, exchange, c.granted, now)
	default:
		l.ObserveRefusal(lane.RefusedLimit, exchange, c.granted, now)
	}
}

// complete ends the call with the provider's answer: a success, or a
// failure that retrying cannot fix.
func (c *governedCall) complete(a *upstreamAttempt) {
	l, o, d, resp := c.l, &c.o, &c.res.details, a.resp
	if resp.StatusCode() < 400 {
		l.Answered(a.now)
	}
	if c.retry != nil && c.retry.last != nil {
		fasthttp.ReleaseResponse(c.retry.last)
		c.retry.last = nil
	}
	d.Status = StatusCompleted
	switch {
	case resp.StatusCode() >= 400:
		d.Status = StatusFailed
		d.Errors = append(d.Errors, attemptError(a.oc, resp.StatusCode(), bufferedBody(resp), nil, o.attemptTimeout))
	case a.n > 1:
		d.Status = StatusCompletedWithRetries
	}
	c.res.resp, c.res.lane, c.res.attempt, c.res.tenant = resp, l, a.at, o.tenant
	c.res.granted, c.res.sent = c.granted, a.sent
	if c.costed && resp.BodyStream() != nil {
		c.res.usage = &costCorrection{cost: c.cost, bodyBytes: c.textBytes}
	}
}

// tooLarge ends the call whose answer was larger than it may read whole:
// a retry would get the same.
func (c *governedCall) tooLarge(ctx context.Context, a *upstreamAttempt) {
	l, o, d := c.l, &c.o, &c.res.details
	l.Done(a.at)
	l.Queue().ReleaseTenant(c.o.tenant)
	fasthttp.ReleaseResponse(a.resp)
	d.Status = StatusFailed
	d.Errors = append(d.Errors, fmt.Sprintf("answer too large: more than %d bytes", o.maxResponse))
	e := upstreamError(c.req.up, a.err)
	c.giveUp(ctx, &e)
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

// cutError returns the error of a call whose attempt was cut because its
// client left, and why it was cut. For a Call of Do, the end of its
// context: the error is then nil, the reason the context ended, as for a
// wait (see giveUp).
func (c *governedCall) cutError(ctx context.Context) (e *apiError, why error) {
	if c.o.client == nil {
		// The watch follows the context Do was given, and ctx derives
		// from it: the watch can cut the attempt before the end of that
		// context has reached ctx, whose cause is still nil then.
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	return &apiError{Status: statusClientClosed, Code: CodeClientClosed, Message: "client disconnected"}, errClientLeft
}

// needsBuffering reports whether an answer is read whole, inside its
// attempt, before it is passed back: every answer but a stream (see
// isStream) of a success, whatever its framing. A cut answer is then a
// failed attempt, retried, never a short body passed on as complete.
func needsBuffering(resp *fasthttp.Response) bool {
	return resp.StatusCode() >= 400 || !isStream(resp.Header.ContentType())
}

// bufferedBody returns an answer's body if it has been read, else nil. (A
// streamed body must not be touched here: Body() would read it whole.)
func bufferedBody(resp *fasthttp.Response) []byte {
	if resp.BodyStream() != nil {
		return nil
	}
	return resp.Body()
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
