package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// errClientLeft is the cause of a call's context ending because its
// client disconnected.
var errClientLeft = errors.New("client disconnected")

// clientWatch watches the clients of calls, from the moment a call enters
// its round trip until it leaves it (and of sync batches while they run),
// and acts when a client disconnects: a call waiting (in a lane's queue, for
// the provider's budget, for a retry) sees its context end; an attempt in
// flight upstream is cut at once, its upstream connection closed, so the
// provider stops generating an answer nobody will read and the lane's slot
// comes back. fasthttp notices a departed client only when a write to it
// fails, and its client cannot be cancelled, so both halves are Governor's
// own.
//
// One goroutine peeks at every watched client each interval (see
// peerGone). Ten thousand waiting calls thus cost no timer and no goroutine
// each, only an entry here, taken from a pool. A client is first peeked at
// after a full interval: a call answered within it costs no syscall. The
// goroutine runs while something is watched and ends at the first check
// that finds nothing to watch, or at close.
//
// Cutting an attempt needs the upstream connection it runs on, which
// fasthttp picks from its pool inside DoDeadline and does not tell. The
// watch learns it from the request body: the request carries the
// watchedClient as its body stream, fasthttp writes the body from the
// goroutine that runs the attempt after it has taken a connection and
// recorded it in the response (Response.ParseNetConn), and WriteTo reads it
// from there (see connOf) before writing the body. A client that is gone by
// then gets nothing sent at all.
//
// A Call of Do has no client connection: its client is its caller, who is
// gone when the Call's context ends (see follow). Nothing peeks at it; the
// end of the context acts on it as the loop acts on a departed client.
type clientWatch struct {
	every time.Duration
	now   func() time.Time // the clock of the watches' sent
	pool  sync.Pool        // of *watchedClient

	mu      sync.Mutex
	clients []*watchedClient
	ticks   uint64 // checks begun
	running bool   // the loop goroutine runs
	closed  bool
	quit    chan struct{} // closed by close
	wg      sync.WaitGroup

	batch []*watchedClient // the loop's copy of clients
}

// A watchedClient is the watch of one call's client, from watch (or
// follow) until unwatch. It is used by the call's goroutine and by the loop
// (for follow, by the func that acts on the context's end); the fields
// below mu are guarded by it. The loop touches conn only while it holds mu
// and the watch is on: once unwatch has taken mu, fasthttp may be reading
// the next request from conn, and a peek would wait behind that read.
type watchedClient struct {
	body []byte             // the request body, carried by each attempt (see carryBody); nil for none
	resp *fasthttp.Response // the response of the attempt being sent; the call's goroutine only
	off  int                // bytes of body read by Read in this attempt
	now  func() time.Time   // the clock of sent
	// handed, if set, is called with the time the attempt's request is
	// handed to its connection (see takeOff), and then cleared.
	handed func(sent time.Time)

	index int    // in clientWatch.clients, -1 when not in it; guarded by clientWatch.mu
	since uint64 // clientWatch.ticks when the watch began; guarded by clientWatch.mu

	unfollow func() // for a watch made by follow: stops following its context

	mu     sync.Mutex
	conn   net.Conn                // the client; nil once unwatched, and for a watch made by follow
	blind  bool                    // the client's read deadline may still blind peerGone
	gone   bool                    // the client has disconnected (for follow: the context has ended)
	cancel context.CancelCauseFunc // of the context handed out, if any
	up     *trackedConn            // the connection of the attempt in flight, once its body is sent
	cut    bool                    // the attempt in flight was cut
}

// newClientWatch returns a watch that checks its clients each every, and
// tells when attempts are sent by now.
func newClientWatch(every time.Duration, now func() time.Time) *clientWatch {
	return &clientWatch{every: every, now: now, quit: make(chan struct{})}
}

// watch starts watching the client behind conn. body is the request body
// that carryBody hands to each attempt; it must stay valid until unwatch.
// Call unwatch when the call is over. After close, the client is checked
// only when context is called.
//
//go:noinline
func (w *clientWatch) watch(conn net.Conn, body []byte) *watchedClient {
	wc := w.get(body)
	wc.mu.Lock()
	wc.conn, wc.blind = conn, true
	wc.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wc
	}
	wc.index, wc.since = len(w.clients), w.ticks
	w.clients = append(w.clients, wc)
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.run()
	}
	return wc
}

// follow starts the watch of a call whose client is a caller rather than a
// connection (a Call of Do): the caller is gone when ctx ends, and the
// call's attempt in flight is then cut as a departed client's is. body is
// as for watch. The loop never sees the watch, and it hands out no context
// (see governedCall.own): ctx's cause, not errClientLeft, says why the call
// ended. Call unwatch when the call is over.
func (w *clientWatch) follow(ctx context.Context, body []byte) *watchedClient {
	wc := w.get(body)
	acted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(acted)
		wc.mu.Lock()
		defer wc.mu.Unlock()
		wc.leftLocked()
	})
	wc.unfollow = func() {
		if !stop() {
			<-acted // nothing is cut after unwatch returns
		}
	}
	return wc
}

// get returns a watch from the pool, or a new one, for a call with body.
func (w *clientWatch) get(body []byte) *watchedClient {
	wc, _ := w.pool.Get().(*watchedClient)
	if wc == nil {
		wc = &watchedClient{index: -1}
	}
	wc.body, wc.now = body, w.now
	return wc
}

// unwatch ends the watch of wc, cancels the context it handed out, and
// keeps wc for another call: nothing is cut after it returns, and wc must
// not be used again.
func (w *clientWatch) unwatch(wc *watchedClient) {
	if wc.unfollow != nil {
		wc.unfollow()
		wc.unfollow = nil
	}
	wc.mu.Lock()
	cancel := wc.cancel
	wc.conn, wc.cancel, wc.up = nil, nil, nil
	wc.blind, wc.gone, wc.cut = false, false, false
	wc.mu.Unlock()
	w.mu.Lock()
	if i := wc.index; i >= 0 {
		last := len(w.clients) - 1
		w.clients[i] = w.clients[last]
		w.clients[i].index = i
		w.clients[last] = nil
		w.clients = w.clients[:last]
		wc.index = -1
	}
	w.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
	wc.body, wc.resp, wc.off, wc.handed = nil, nil, 0, nil
	// The loop may still hold wc in its batch: it locks wc.mu before it
	// looks, and then finds it unwatched or watching its next call's
	// client, which it may peek at early.
	w.pool.Put(wc)
}

// close ends the loop and waits for it; later watches are not checked by
// it.
func (w *clientWatch) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *clientWatch) run() {
	defer w.wg.Done()
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-t.C:
		}
		if !w.check() {
			return
		}
	}
}

// check peeks once at every client watched for a full interval, and acts
// on the ones that have gone. It reports false, and marks the loop stopped,
// when nothing is watched.
func (w *clientWatch) check() bool {
	w.mu.Lock()
	if len(w.clients) == 0 {
		w.running = false
		w.mu.Unlock()
		return false
	}
	before := w.ticks
	w.ticks++
	for _, wc := range w.clients {
		if wc.since < before {
			w.batch = append(w.batch, wc)
		}
	}
	w.mu.Unlock()
	for _, wc := range w.batch {
		wc.check()
	}
	clear(w.batch) // holds no watch past its end
	w.batch = w.batch[:0]
	return true
}

// check peeks at the client, if it is still watched, and acts if it has
// gone.
func (wc *watchedClient) check() {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.conn == nil || wc.gone {
		return
	}
	wc.unblindLocked()
	if peerGone(wc.conn) {
		wc.leftLocked()
	}
}

// unblindLocked clears the client's read deadline, once: the request is
// read, and the deadline fasthttp set for it (or a drain's, see
// connTracker) would blind peerGone. fasthttp sets its own again before the
// next request, after unwatch. It requires wc.mu to be held and the watch
// to be on.
func (wc *watchedClient) unblindLocked() {
	if wc.blind {
		wc.blind = false
		_ = wc.conn.SetReadDeadline(time.Time{})
	}
}

// leftLocked acts on the client's departure. It requires wc.mu to be held.
func (wc *watchedClient) leftLocked() {
	wc.gone = true
	if wc.cancel != nil {
		wc.cancel(errClientLeft)
	}
	if wc.up != nil {
		wc.cut = true
		wc.up.cut(wc)
	}
}

// context returns a context derived from parent that ends with cause
// errClientLeft when the client disconnects, and its cancel function. It
// checks the client at once: a client that left while an attempt ran,
// unseen yet, must not have the retry about to wait for it sent. It is
// called once, by the call's goroutine, when the call first has to wait.
func (wc *watchedClient) context(parent context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	wc.mu.Lock()
	defer wc.mu.Unlock()
	wc.cancel = cancel
	if !wc.gone {
		wc.unblindLocked()
		if peerGone(wc.conn) {
			wc.leftLocked()
		}
	} else {
		cancel(errClientLeft)
	}
	return ctx, cancel
}

// left reports whether the client has been seen to disconnect.
func (wc *watchedClient) left() bool {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.gone
}

// carryBody makes req, about to be sent with resp, carry the watch as its
// body stream, so that the attempt's upstream connection is known once
// fasthttp writes the body (see WriteTo). A call without a body is not
// carried (a stream would add "Content-Length: 0" to a GET); its attempts
// are not cut, but its client still cannot make it retry.
func (wc *watchedClient) carryBody(req *fasthttp.Request, resp *fasthttp.Response) {
	if len(wc.body) == 0 {
		return
	}
	wc.resp, wc.off = resp, 0
	req.SetBodyStream(wc, len(wc.body))
}

// takeOff records the connection the attempt's request is being written
// to, and tells handed when. It fails when the client has left already: the request is
// then never completed and the connection is closed.
func (wc *watchedClient) takeOff() error {
	if f := wc.handed; f != nil {
		wc.handed = nil
		f(wc.now())
	}
	c := connOf(wc.resp)
	if c != nil {
		c.own(wc)
	}
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.gone {
		wc.cut = true
		return errClientLeft
	}
	wc.up = c
	return nil
}

// land ends the attempt in flight and reports whether it was cut because the
// client left. Its upstream connection, which may already serve another call
// by now, is no longer cut.
func (wc *watchedClient) land() bool {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	cut := wc.cut
	wc.up, wc.cut, wc.resp = nil, false, nil
	return cut
}

// SupportsBodyWriteTo tells fasthttp to write the body with WriteTo.
func (wc *watchedClient) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the request body to the upstream connection, having first
// recorded the connection (see takeOff).
func (wc *watchedClient) WriteTo(dst io.Writer) (int64, error) {
	if err := wc.takeOff(); err != nil {
		return 0, err
	}
	n, err := dst.Write(wc.body)
	return int64(n), err
}

// Read reads the request body, should fasthttp read it rather than call
// WriteTo.
func (wc *watchedClient) Read(p []byte) (int, error) {
	if wc.off == 0 {
		if err := wc.takeOff(); err != nil {
			return 0, err
		}
	}
	if wc.off >= len(wc.body) {
		return 0, io.EOF
	}
	n := copy(p, wc.body[wc.off:])
	wc.off += n
	return n, nil
}
