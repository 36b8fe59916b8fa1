package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/queue"
)

// callOptions are how one call is governed.
type callOptions struct {
	urgency        int
	maxRetries     int
	attemptTimeout time.Duration
	// client is the caller's connection, watched during the call so that
	// a caller who leaves takes the call out of the queue and cuts its
	// attempt in flight; nil for calls with no connection of their own
	// (batch items).
	client net.Conn
	// body is the request body, which stays valid for the round trip;
	// used only with client (see clientWatch.carryBody).
	body []byte
}

// callResult is what a governed round trip came to: an upstream answer to
// pass back (resp, owned by the receiver, with release to be called once
// it is written) or an error of Governor's own.
type callResult struct {
	resp *fasthttp.Response
	// slot is the queue whose slot the call holds until release; nil when
	// none is held. (A method value such as q.Release would cost an
	// allocation per call.)
	slot    *queue.Queue
	err     *apiError
	details Details
}

// release gives the lane's slot back, if the call holds one.
func (r *callResult) release() {
	if r.slot != nil {
		r.slot.Release()
	}
}

// errClientLeft is the cause of a call's context ending because its
// client disconnected.
var errClientLeft = errors.New("client disconnected")

// roundTrip sends req to l's upstream under the lane's governance: it waits
// in the lane's queue until the controller's limit lets it out, classifies
// the answer, feeds the outcome to the controller, and retries what a retry
// can fix, ahead of fresh calls, after the provider's hint or a jittered
// backoff, until the budget is spent. A streamed answer is returned as soon
// as its headers arrive; it is never retried after that.
func (p *Proxy) roundTrip(ctx context.Context, l *lane, req *fasthttp.Request, o callOptions) callResult {
	// The client is watched for the whole round trip: a client that
	// leaves takes its call out of the queue and cuts its attempt in
	// flight. The watch's context is made the first time the call has to
	// wait: a call let out at once pays for a timer and nothing more.
	var w *clientWatch
	if o.client != nil {
		w = newClientWatch(o.client, clientCheckInterval, o.body)
		defer w.stop()
	}
	watching := false
	watch := func() {
		if w != nil && !watching {
			ctx, watching = w.context(ctx), true
		}
	}
	var d Details
	var last *fasthttp.Response // the previous failed answer, returned if we give up
	// giveUp ends the call: with the provider's last answer when there is
	// one and someone to read it, else with e.
	giveUp := func(e *apiError) callResult {
		d.Status = StatusFailed
		clientLeft := errors.Is(context.Cause(ctx), errClientLeft) || w != nil && w.left()
		if last != nil && !clientLeft {
			return callResult{resp: last, details: d}
		}
		if last != nil {
			fasthttp.ReleaseResponse(last)
		}
		if e == nil {
			e = p.waitError(ctx, context.Cause(ctx))
		}
		e.Final = true
		return callResult{err: e, details: d}
	}

	for attempt := 1; ; attempt++ {
		prio := queue.Priority{Urgency: o.urgency, Retry: attempt > 1}
		if l.q.TryAcquire(prio) {
			l.m.queueWait.Update(0)
		} else {
			watch()
			if err := p.wait(ctx, l, prio, &d); err != nil {
				return giveUp(err)
			}
		}

		seq, delay := l.pace.reserve(p.cfg.Now())
		if l.co != nil {
			if d, ok := p.reserveShared(ctx, l); ok {
				delay = d // the bucket every Governor on the lane draws from
			}
		}
		if delay > 0 {
			// The provider's budget is spent: wait for its refill while
			// holding the slot, instead of collecting a 429.
			watch()
			if err := sleepCtx(ctx, delay); err != nil {
				l.q.Release()
				return giveUp(p.waitError(ctx, err))
			}
			d.Queue += delay
		}

		resp := fasthttp.AcquireResponse()
		if w != nil {
			w.carryBody(req, resp)
		}
		start := p.cfg.Now()
		err := l.upstream.client.DoDeadline(req, resp, start.Add(o.attemptTimeout))
		oc := outcomeAnswered
		if err != nil {
			oc = classifyErr(err)
		} else if needsBuffering(resp) {
			// Read the body inside the attempt: a body cut short is a
			// connection error to retry, and a 429's body says whether it
			// is final.
			if err = bufferBody(resp, int64(p.cfg.MaxResponseBytes)); err != nil {
				oc = classifyErr(err)
				if errors.Is(err, errResponseTooLarge) {
					oc = outcomeAnswered // retrying gets the same; passed back cut as a Governor error
				}
			}
		}
		if err == nil {
			oc = classifyStatus(resp.StatusCode(), bufferedBody(resp))
		}
		now := p.cfg.Now()
		latency := now.Sub(start)
		if w != nil && w.land() {
			// Cut because the client left: the provider did nothing
			// wrong, so the controller does not hear of it, and nobody
			// is left to retry for.
			fasthttp.ReleaseResponse(resp) // closes the connection of an answer not read whole
			l.q.Release()
			l.lastUsed.Store(now.UnixNano())
			d.Attempts++
			d.Execution += latency
			d.Errors = append(d.Errors, attemptError(outcomeClientGone, 0, nil, nil, 0))
			l.m.attempts[outcomeClientGone].Inc()
			return giveUp(&apiError{Status: statusClientClosed, Code: CodeClientClosed, Message: "client disconnected"})
		}
		if err == nil {
			l.pace.observe(&resp.Header, seq, start, now)
		}
		d.Attempts++
		d.Execution += latency
		l.m.attempts[oc].Inc()
		l.m.upstream.Update(latency.Seconds())
		l.observe(oc, latency, l.q.Stats().InFlight, now, p.cfg.Logger)

		if err == nil && oc == outcomeAnswered || oc == outcomeQuota {
			if resp.StatusCode() < 400 {
				l.answered(now, p.cfg.Logger)
			}
			if last != nil {
				fasthttp.ReleaseResponse(last)
			}
			d.Status = StatusCompleted
			switch {
			case resp.StatusCode() >= 400:
				d.Status = StatusFailed
				d.Errors = append(d.Errors, attemptError(oc, resp.StatusCode(), bufferedBody(resp), nil, o.attemptTimeout))
			case attempt > 1:
				d.Status = StatusCompletedWithRetries
			}
			return callResult{resp: resp, slot: l.q, details: d}
		}
		if err != nil && oc == outcomeAnswered { // response too large
			l.q.Release()
			fasthttp.ReleaseResponse(resp)
			e := upstreamError(l.upstream, err)
			return giveUp(&e)
		}

		// A failed attempt.
		d.Errors = append(d.Errors, attemptError(oc, resp.StatusCode(), bufferedBody(resp), err, o.attemptTimeout))
		hint := time.Duration(0)
		if err == nil {
			hint = min(retryAfter(&resp.Header, now), p.cfg.MaxPause)
			if oc == outcomeRateLimited && hint > 0 {
				l.pause(now.Add(hint), now, p.cfg.Logger)
			}
		}
		l.q.Release()
		if err != nil {
			fasthttp.ReleaseResponse(resp)
		} else {
			if last != nil {
				fasthttp.ReleaseResponse(last)
			}
			last = resp
		}
		if p.ctx.Err() != nil && err != nil {
			// Cut at the end of a drain (resp is already released).
			return giveUp(&apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining,
				Message: "Governor shut down before the provider answered"})
		}
		if attempt > o.maxRetries || ctx.Err() != nil {
			if err != nil {
				e := upstreamError(l.upstream, err)
				return giveUp(&e)
			}
			return giveUp(nil)
		}
		l.m.retries[oc].Inc()
		watch()
		if err := p.backoff(ctx, attempt, hint); err != nil {
			return giveUp(p.waitError(ctx, err))
		}
	}
}

// needsBuffering reports whether an answer is read whole before it is
// passed back: every error answer, and any other answer of known, modest
// length that is not an event stream.
func needsBuffering(resp *fasthttp.Response) bool {
	if resp.StatusCode() >= 400 {
		return true
	}
	size := resp.Header.ContentLength()
	return !isEventStream(resp.Header.ContentType()) && size >= 0 && size <= bufferResponseBytes
}

// bufferedBody returns an answer's body if it has been read, else nil. (A
// streamed body must not be touched here: Body() would read it whole.)
func bufferedBody(resp *fasthttp.Response) []byte {
	if resp.BodyStream() != nil {
		return nil
	}
	return resp.Body()
}

// wait waits for a slot in the lane's queue.
func (p *Proxy) wait(ctx context.Context, l *lane, prio queue.Priority, d *Details) *apiError {
	qctx, cancel := context.WithTimeoutCause(ctx, p.cfg.QueueTimeout, errQueueTimeout)
	defer cancel()
	start := p.cfg.Now()
	err := l.q.Acquire(qctx, prio)
	waited := p.cfg.Now().Sub(start)
	d.Queue += waited
	l.m.queueWait.Update(waited.Seconds())
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return p.waitError(qctx, err)
	}
	return p.waitError(ctx, err)
}

var errQueueTimeout = errors.New("queue timeout")

// waitError turns the end of a wait into Governor's error.
func (p *Proxy) waitError(ctx context.Context, err error) *apiError {
	switch {
	case errors.Is(err, queue.ErrFull):
		return &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeQueueFull, RetryAfter: 1,
			Message: "Governor's queue for this lane is full; retry later"}
	case errors.Is(err, queue.ErrClosed):
		return &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining, RetryAfter: 1,
			Message: "Governor is shutting down"}
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errQueueTimeout):
		return &apiError{Status: fasthttp.StatusGatewayTimeout, Code: CodeQueueTimeout,
			Message: fmt.Sprintf("waited longer than %s in Governor's queue", p.cfg.QueueTimeout)}
	case errors.Is(cause, errClientLeft):
		return &apiError{Status: statusClientClosed, Code: CodeClientClosed, Message: "client disconnected"}
	default:
		return &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining, RetryAfter: 1,
			Message: "Governor is shutting down"}
	}
}

// statusClientClosed is nginx's 499: the client left before its answer.
// Nobody reads it; it shows in metrics.
const statusClientClosed = 499

// backoff waits before a retry: the provider's hint when it gave one (the
// lane may resume earlier, see lane.answered, but the call that was told to
// wait does), else exponential backoff with full jitter.
func (p *Proxy) backoff(ctx context.Context, attempt int, hint time.Duration) error {
	d := hint
	if d == 0 {
		ceiling := p.cfg.BackoffBase << min(attempt-1, 30)
		if ceiling <= 0 || ceiling > p.cfg.BackoffMax {
			ceiling = p.cfg.BackoffMax
		}
		d = rand.N(ceiling + 1)
	}
	return sleepCtx(ctx, d)
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxRetriesOf reads X-Governor-Max-Retries; absent or malformed means def.
func maxRetriesOf(v []byte, def int) int {
	if len(v) == 0 {
		return def
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		return def
	}
	return min(n, MaxRetriesCeiling)
}
