package proxy

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

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
