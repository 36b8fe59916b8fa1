package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmgovernor/governor/internal/fdlimit"
)

// acceptGrace is how long a closing listener keeps accepting.
const acceptGrace = 100 * time.Millisecond

// drainListener is a listener whose Close does not reset the connections
// waiting in the kernel's accept backlog.
//
// Closing a listening socket makes Linux reset every connection that has
// completed its handshake but was not yet accepted; those clients have
// already sent their request and see "connection reset" — a call lost at
// SIGTERM. Instead, Close lets Accept go on for acceptGrace, so whatever is
// in the backlog is accepted and served like any other call in the drain,
// then closes the socket for real.
//
// It hands out each connection as a clientConn, whose Close can linger.
//
// Accept outlives running out of file descriptors: on EMFILE or ENFILE it
// pauses and accepts again (see fdlimit), where fasthttp's Serve would
// return and the process stop.
type drainListener struct {
	*net.TCPListener
	closing   atomic.Bool
	closed    chan struct{} // closed by Close: ends a pause in Accept
	closeOnce sync.Once

	backoff fdlimit.Backoff // only Accept's goroutine (fasthttp's accept loop) uses it
	onPause func(err error) // called when a shortage of descriptors begins

	// maxConns bounds the connections open (0: no bound); a connection
	// beyond it is answered refusal and closed, lingering (see refuse).
	maxConns int64
	open     atomic.Int64
	refusal  []byte
	onRefuse func() // called for each connection refused; may be nil

	// The refused connections lingering, each drained by a goroutine
	// that Close stops and waits for.
	lingerFor    time.Duration // how long one lingers at most
	maxLingering int           // how many linger at once at most
	lingerMu     sync.Mutex
	lingering    map[*net.TCPConn]struct{} // nil once Close has begun
	lingerers    sync.WaitGroup
}

// refusedLinger bounds how long a refused connection is drained before it
// is closed, and maxRefusedLingering how many are drained at once, at most
// one per refusedLingerShare connections of the cap: a refusal happens
// when connections, so file descriptors, are scarce.
const (
	refusedLinger       = 2 * time.Second
	maxRefusedLingering = 64
	refusedLingerShare  = 16
)

// servedListener is a listener handed to fasthttp's Serve. Its accepting
// channel closes on the first Accept, which fasthttp calls only once it has
// registered the listener for shutdown.
type servedListener struct {
	net.Listener
	accepting chan struct{}
	once      sync.Once
}

func newServedListener(ln net.Listener) *servedListener {
	return &servedListener{Listener: ln, accepting: make(chan struct{})}
}

func (l *servedListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	return l.Listener.Accept()
}

// listenerFor wraps ln: a TCP listener in a drainListener that holds at
// most maxConns connections (0: no bound) and answers refusal to the ones
// beyond, telling onRefuse (if not nil) of each, any other in fdlimit's
// Listener. onPause is told when descriptors run out.
func listenerFor(ln net.Listener, onPause func(error), maxConns int, refusal []byte, onRefuse func()) net.Listener {
	if tl, ok := ln.(*net.TCPListener); ok {
		return &drainListener{TCPListener: tl, closed: make(chan struct{}), onPause: onPause,
			maxConns: int64(maxConns), refusal: refusal, onRefuse: onRefuse,
			lingerFor: refusedLinger, lingering: make(map[*net.TCPConn]struct{}),
			maxLingering: min(max(maxConns/refusedLingerShare, 1), maxRefusedLingering)}
	}
	return fdlimit.Listener(ln, onPause)
}

// Close starts the grace period; Accept closes the socket when it ends.
// It ends the lingering of refused connections and waits for it; those
// refused from then on are closed at once.
func (l *drainListener) Close() error {
	if l.closing.Swap(true) {
		return nil
	}
	close(l.closed)
	l.lingerMu.Lock()
	for c := range l.lingering {
		_ = c.SetReadDeadline(time.Now()) // ends its drain
	}
	l.lingering = nil
	l.lingerMu.Unlock()
	l.lingerers.Wait()
	return l.TCPListener.SetDeadline(time.Now().Add(acceptGrace))
}

// Accept accepts connections, including during the grace period; after it,
// it closes the socket and reports net.ErrClosed. While file descriptors
// are exhausted it pauses and tries again.
func (l *drainListener) Accept() (net.Conn, error) {
	for {
		c, err := l.TCPListener.AcceptTCP()
		if err == nil {
			l.backoff.Reset()
			if l.maxConns > 0 && l.open.Load() >= l.maxConns {
				l.refuse(c)
				continue
			}
			l.open.Add(1)
			return &clientConn{TCPConn: c, open: &l.open}, nil
		}
		if l.closing.Load() {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) || fdlimit.Exhausted(err) {
				l.closeOnce.Do(func() { _ = l.TCPListener.Close() })
				return nil, net.ErrClosed
			}
		}
		if !fdlimit.Exhausted(err) {
			return nil, err
		}
		if !l.backoff.Pausing() && l.onPause != nil {
			l.onPause(err)
		}
		l.backoff.Wait(l.closed) // a Close ends the pause; the next Accept sees it
	}
}

// refuse answers a connection beyond maxConns with the refusal, sends FIN,
// and closes it after a lingering close like clientConn's, drained by a
// goroutine of its own so that the accept loop goes on.
//
// The client has usually sent its request, or is sending it, when the
// refusal is written, and refuse never reads it. Linux answers a close with
// unread bytes in the socket, or bytes arriving after it, with a reset: a
// client still writing its request gets "broken pipe" or "connection reset"
// and never reads the 503 that tells it to retry later. Draining what the
// client sends until it closes, or for at most lingerFor, lets it read the
// answer. Beyond maxLingering drained at once, or once Close has
// begun, a refused connection is closed at once.
func (l *drainListener) refuse(c *net.TCPConn) {
	if l.onRefuse != nil {
		l.onRefuse()
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(l.refusal)
	lingers := l.startLinger(c) // before FIN: the client may close on it
	_ = c.CloseWrite()
	if !lingers {
		_ = c.Close()
		return
	}
	go func() {
		defer l.lingerers.Done()
		_, _ = io.Copy(io.Discard, c) // until the client closes, or the deadline
		l.lingerMu.Lock()
		delete(l.lingering, c)
		l.lingerMu.Unlock()
		_ = c.Close()
	}()
}

// startLinger counts c among the connections lingering, with its read
// deadline set, and reports whether there was room for it.
func (l *drainListener) startLinger(c *net.TCPConn) bool {
	l.lingerMu.Lock()
	defer l.lingerMu.Unlock()
	if l.lingering == nil || len(l.lingering) >= l.maxLingering {
		return false
	}
	if c.SetReadDeadline(time.Now().Add(l.lingerFor)) != nil {
		return false
	}
	l.lingering[c] = struct{}{}
	l.lingerers.Add(1)
	return true
}

// lingerTimeout bounds how long a connection closed on a request that was
// not read whole is drained before it is closed (nginx's lingering close).
const lingerTimeout = 5 * time.Second

// clientConn is a client connection that can be closed gracefully after an
// answer sent before its request was read whole.
//
// fasthttp answers a body over the limit with 413 as soon as it knows, and
// closes the connection while the client is still sending the body. Linux
// answers a close with unread bytes in the socket, or bytes arriving after
// it, with a reset, and a reset makes the client's kernel discard the 413
// before the client has read it: the client sees "connection reset" and may
// retry a call that can never succeed. A lingering close sends FIN after
// the answer, then reads and discards what the client still sends, for at
// most lingerTimeout, before closing.
type clientConn struct {
	*net.TCPConn
	linger atomic.Bool
	info   connInfo // see connTracker

	open   *atomic.Int64 // its listener's count of open connections
	closed atomic.Bool

	// writeDeadline is the write deadline last set. Only the goroutine
	// that serves the connection sets write deadlines.
	writeDeadline time.Time

	// received counts the bytes Read has handed to fasthttp, so that the
	// budget can tell how far a request's body has come (see
	// bodyBudget.reserve); requestStart is its value when the current
	// request began (see connTracker.state), set and read only by the
	// goroutine that serves the connection. tooSlow is set when the body
	// being read gave its room up for arriving too slowly.
	received     atomic.Int64
	requestStart int64
	tooSlow      atomic.Bool

	// head scans the request head being read; only the goroutine that
	// serves the connection uses it.
	head headScan

	// ahead holds the bytes read ahead of fasthttp's reader (see Read);
	// nil when there are none. It and the fields below are used only by
	// the goroutine that serves the connection.
	ahead *readAhead
	raw   syscall.RawConn
	// readReady is readArrived, which sets arrived, arrivedN and
	// arrivedErr (see readFirst).
	readReady  func(fd uintptr) bool
	arrived    *readAhead
	arrivedN   int
	arrivedErr error
}

// SetWriteDeadline sets the write deadline and remembers it.
func (c *clientConn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline = t
	return c.TCPConn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines and remembers the write deadline.
func (c *clientConn) SetDeadline(t time.Time) error {
	c.writeDeadline = t
	return c.TCPConn.SetDeadline(t)
}

// boundWrite gives the writes to the client behind conn a deadline d from
// now, or leaves the one already set if it is at most d/deadlineSlack
// earlier than that: answers written back to back on a keep-alive
// connection then move the deadline (a runtime timer) once in a while, not
// once per answer, and each write is still bounded by at least
// d·(1-1/deadlineSlack).
func boundWrite(conn net.Conn, now time.Time, d time.Duration) {
	deadline := now.Add(d)
	if c, ok := conn.(*clientConn); ok && !c.writeDeadline.IsZero() && !c.writeDeadline.Before(deadline.Add(-d/deadlineSlack)) {
		return
	}
	_ = conn.SetWriteDeadline(deadline)
}

// lingerOnClose makes Close a lingering close.
func (c *clientConn) lingerOnClose() { c.linger.Store(true) }

// Close closes the connection, lingering when lingerOnClose was called.
func (c *clientConn) Close() error {
	if c.open != nil && c.closed.CompareAndSwap(false, true) {
		defer c.open.Add(-1)
	}
	if c.linger.Load() && c.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
		buf := make([]byte, 16<<10)
		for {
			// From the socket: Close may be called by another goroutine
			// than the one that reads (a shutdown closing idle
			// connections), and what was read ahead is discarded anyway.
			if _, err := c.TCPConn.Read(buf); err != nil {
				break
			}
		}
	}
	return c.TCPConn.Close()
}
