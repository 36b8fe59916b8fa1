package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/queue"
)

// A call's waits: for a slot in its lane's queue, for the provider's
// budget, and between its attempts.

// acquire takes a slot in the lane for the attempt, waiting in the queue
// when none is free, for QueueTimeout at most, then waits for the
// provider's budget (see pacer). It returns the call's context, its own if
// it had to wait (see own).
//
// Its frame is on the stack while the call waits: the rest of the work is
// done in methods that have returned by then.
func (c *governedCall) acquire(ctx context.Context, attempt int) (context.Context, *apiError) {
	prio := queue.Priority{Urgency: c.o.urgency, Retry: attempt > 1, Tenant: c.o.tenant}
	c.granted = time.Time{}
	if c.l.Queue().TryAcquire(prio) {
		return c.pace(ctx, 0) // granted now, which pace reads
	}
	ctx = c.own(ctx)
	start := c.startWait()
	granted, err := c.l.Queue().AcquireAt(ctx, prio)
	queued, e := c.waited(ctx, start, err)
	if e != nil {
		return ctx, e
	}
	c.granted = granted
	return c.pace(ctx, queued)
}

// startWait sets the queue timeout of a wait, which ends the call's own
// context (see own) with cause errQueueTimeout, and returns when the wait
// starts.
//
//go:noinline
func (c *governedCall) startWait() time.Time {
	if c.timer == nil {
		cancel := c.cancel
		c.timer = time.AfterFunc(c.p.cfg.QueueTimeout, func() { cancel(errQueueTimeout) })
	} else {
		c.timer.Reset(c.p.cfg.QueueTimeout)
	}
	return c.p.cfg.Now()
}

// waited accounts for a wait that began at start and ended with err (from
// Acquire): it returns how long it was, and the call's error if it ended
// without a slot (pace accounts for a wait that got one).
//
//go:noinline
func (c *governedCall) waited(ctx context.Context, start time.Time, err error) (time.Duration, *apiError) {
	p, l := c.p, c.l
	if !c.timer.Stop() && err == nil {
		// The timeout came as the slot was granted: it wins, as a
		// cancellation does in Acquire. (Its cause must be set before
		// the call goes on.)
		c.cancel(errQueueTimeout)
		l.Queue().ReleaseTenant(c.o.tenant)
		err = context.Cause(ctx)
	}
	waited := p.cfg.Now().Sub(start)
	c.res.details.Queue += waited
	if err == nil {
		return waited, nil
	}
	l.ObserveWait(waited, 0)
	return waited, p.waitError(ctx, err)
}

// pace waits, holding the slot, until the provider's budget lets the
// attempt go, instead of collecting a 429. queued is how long the attempt
// waited for its slot: the lane's metrics take the whole wait.
//
//go:noinline
func (c *governedCall) pace(ctx context.Context, queued time.Duration) (context.Context, *apiError) {
	p, l := c.p, c.l
	now := p.cfg.Now()
	if c.granted.IsZero() {
		c.granted = now
	}
	seq, delay := l.Reserve(ctx, now)
	c.seq = seq
	c.mark = lane.TokenMark{}
	if l.HasTokenBudget() {
		body := c.req.in.Body()
		if !c.costed {
			c.textBytes = textBytes(body)
			c.cost, c.costed = l.EstimateCost(c.textBytes, maxTokensOf(body)), true
		}
		w, mark, err := l.ReserveTokens(c.cost, now)
		if err != nil {
			l.ObserveWait(queued, 0)
			l.Queue().ReleaseTenant(c.o.tenant)
			return ctx, &apiError{Status: fasthttp.StatusBadRequest, Code: CodeExceedsTokenBudget,
				Message: "Governor: this call can never run within the provider's token budget (" + err.Error() + "); shorten the prompt or lower max_tokens"}
		}
		c.mark, delay = mark, max(delay, w)
	}
	if delay <= 0 {
		l.ObserveWait(queued, 0)
		return ctx, nil
	}
	ctx = c.own(ctx)
	l.Hold(now)
	// The booking is a place in line: once the wait is over, the lane
	// says whether a cut of its share (or a report) moved it back.
	var waited time.Duration
	for delay > 0 {
		if err := sleepCtx(ctx, delay, nil); err != nil {
			end := p.cfg.Now()
			l.Unhold(end)
			held := max(0, end.Sub(now))
			c.res.details.Queue += held
			l.ObserveWait(queued, held)
			l.Queue().ReleaseTenant(c.o.tenant)
			return ctx, p.waitError(ctx, err)
		}
		waited += delay
		// At least the time waited has passed since the booking,
		// whatever a clock set for a test says.
		delay = l.Behind(seq, c.mark, now, later(p.cfg.Now(), now.Add(waited)))
	}
	l.Unhold(p.cfg.Now())
	c.res.details.Queue += waited
	l.ObserveWait(queued, waited)
	return ctx, nil
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
	case p.ctx.Err() == nil:
		// While the proxy runs, only the caller of Do ends a call's
		// context otherwise.
		return &apiError{Status: statusClientClosed, Code: CodeClientClosed, Message: "cancelled by the caller"}
	default:
		return &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining, RetryAfter: 1,
			Message: "Governor is shutting down"}
	}
}

// statusClientClosed is nginx's 499: the client left before its answer.
// Nobody reads it; it shows in metrics.
const statusClientClosed = 499

// backoff waits before a retry: the provider's hint when it gave one, else
// exponential backoff with full jitter. After a 429 (freed not nil) the
// wait also ends when a call of the lane succeeds, as the lane's pause does
// (see lane.Lane.Answered): under a concurrency cap that success freed a
// slot, and the retry, which goes ahead of fresh calls, takes it instead of
// waiting out a hint that fresh calls do not.
func (p *Proxy) backoff(ctx context.Context, attempt int, hint time.Duration, freed <-chan struct{}) error {
	d := hint
	if d == 0 {
		ceiling := p.cfg.BackoffBase << min(attempt-1, 30)
		if ceiling <= 0 || ceiling > p.cfg.BackoffMax {
			ceiling = p.cfg.BackoffMax
		}
		d = rand.N(ceiling + 1)
	}
	return sleepCtx(ctx, d, freed)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleepCtx waits for d, until ctx ends, or until early is closed (nil:
// never).
func sleepCtx(ctx context.Context, d time.Duration, early <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-early:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
