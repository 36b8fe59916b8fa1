package proxy

import (
	"context"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

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
