package proxy

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// clientWatch watches the client of one call, from the moment the call
// enters the round trip until it leaves it, and acts when the client
// disconnects: a call waiting (in the queue, for the provider's budget, for
// a retry) sees its context end; an attempt in flight upstream is cut at
// once, its upstream connection closed, so the provider stops generating an
// answer nobody will read and the lane's slot comes back.
//
// fasthttp notices a departed client only when a write to it fails, and its
// client cannot be cancelled, so both halves are Governor's own. The watch is
// a timer that peeks at the client socket every interval (see peerGone); a
// call answered within the first interval costs one timer and no syscall.
//
// Cutting an attempt needs the upstream connection it runs on, which
// fasthttp picks from its pool inside DoDeadline and does not tell. The
// watch learns it from the request body: the request carries the watch as
// its body stream, fasthttp writes the body from the goroutine that runs the
// attempt after it has taken a connection and recorded it in the response
// (Response.ParseNetConn), and WriteTo reads it from there (see connOf) before
// writing the body. A client that is gone by then gets nothing sent at all.
//
// A clientWatch is used by the goroutine that runs the call and by the
// timer; the fields below mu are guarded by it.
type clientWatch struct {
	client net.Conn
	every  time.Duration
	body   []byte             // the request body; nil for a call that has none
	resp   *fasthttp.Response // the response of the attempt being sent; the call's goroutine only
	off    int                // bytes of body read by Read in this attempt

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	blind   bool                    // the client's read deadline may still blind peerGone
	gone    bool                    // the client has disconnected
	cancel  context.CancelCauseFunc // of the context handed out, if any
	up      *trackedConn            // the connection of the attempt in flight, once its body is sent
	cut     bool                    // the attempt in flight was cut
}

// clientWatches keeps the watches of calls that ended before their timer
// fired (most calls), timer included: a call costs no allocation for its
// watch.
var clientWatches sync.Pool

// newClientWatch starts watching client; the first check is every from
// now. body is the request body that carryBody hands to each attempt; it
// must stay valid until stop.
func newClientWatch(client net.Conn, every time.Duration, body []byte) *clientWatch {
	w, _ := clientWatches.Get().(*clientWatch)
	if w == nil {
		w = &clientWatch{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.client, w.every, w.body, w.blind = client, every, body, true
	if w.timer == nil {
		w.timer = time.AfterFunc(every, w.check)
	} else {
		w.timer.Reset(every)
	}
	return w
}

// context returns a context derived from parent that ends with cause
// errClientLeft when the client disconnects. It checks the client at once:
// a client that left while an attempt ran, unseen yet, must not have the
// retry about to wait for it sent. It is called once, by the call's
// goroutine, when the call first has to wait.
func (w *clientWatch) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	w.unblind()
	gone := peerGone(w.client)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel = cancel
	if gone {
		w.leftLocked()
	} else if w.gone {
		cancel(errClientLeft)
	}
	return ctx
}

// unblind clears the client's read deadline, once: the request is read, and
// the deadline fasthttp set for it (or a drain's, see connTracker) would
// blind peerGone. fasthttp sets its own again before the next request, after
// stop.
func (w *clientWatch) unblind() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.blind && !w.stopped {
		w.blind = false
		_ = w.client.SetReadDeadline(time.Time{})
	}
}

func (w *clientWatch) check() {
	w.unblind()
	gone := peerGone(w.client)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.gone {
		return
	}
	if gone {
		w.leftLocked()
		return
	}
	w.timer.Reset(w.every)
}

// leftLocked acts on the client's departure. It requires w.mu to be held.
func (w *clientWatch) leftLocked() {
	w.gone = true
	if w.cancel != nil {
		w.cancel(errClientLeft)
	}
	if w.up != nil {
		w.cut = true
		w.up.cut(w)
	}
}

// left reports whether the client has been seen to disconnect.
func (w *clientWatch) left() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

// stop ends the watch. Nothing is cut after it returns, and w must not be
// used again.
func (w *clientWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	// A check that has started may still be running: then w is left to
	// the garbage collector rather than reused under it.
	reuse := w.timer.Stop()
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
	if reuse {
		w.mu.Lock()
		w.client, w.body, w.resp, w.off = nil, nil, nil, 0
		w.stopped, w.blind, w.gone, w.cancel, w.up, w.cut = false, false, false, nil, nil, false
		w.mu.Unlock()
		clientWatches.Put(w)
	}
}

// carryBody makes req, about to be sent with resp, carry the watch as its
// body stream, so that the attempt's upstream connection is known once
// fasthttp writes the body (see WriteTo). A call without a body is not
// carried (a stream would add "Content-Length: 0" to a GET); its attempts
// are not cut, but its client still cannot make it retry.
func (w *clientWatch) carryBody(req *fasthttp.Request, resp *fasthttp.Response) {
	if len(w.body) == 0 {
		return
	}
	w.resp, w.off = resp, 0
	req.SetBodyStream(w, len(w.body))
}

// takeOff records the connection the attempt's request is being written
// to. It fails when the client has left already: the request is then never
// completed and the connection is closed.
func (w *clientWatch) takeOff() error {
	c := connOf(w.resp)
	if c != nil {
		c.own(w)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		w.cut = true
		return errClientLeft
	}
	w.up = c
	return nil
}

// land ends the attempt in flight and reports whether it was cut because the
// client left. Its upstream connection, which may already serve another call
// by now, is no longer cut.
func (w *clientWatch) land() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := w.cut
	w.up, w.cut, w.resp = nil, false, nil
	return cut
}

// SupportsBodyWriteTo tells fasthttp to write the body with WriteTo.
func (w *clientWatch) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the request body to the upstream connection, having first
// recorded the connection (see takeOff).
func (w *clientWatch) WriteTo(dst io.Writer) (int64, error) {
	if err := w.takeOff(); err != nil {
		return 0, err
	}
	n, err := dst.Write(w.body)
	return int64(n), err
}

// Read reads the request body, should fasthttp read it rather than call
// WriteTo.
func (w *clientWatch) Read(p []byte) (int, error) {
	if w.off == 0 {
		if err := w.takeOff(); err != nil {
			return 0, err
		}
	}
	if w.off >= len(w.body) {
		return 0, io.EOF
	}
	n := copy(p, w.body[w.off:])
	w.off += n
	return n, nil
}
