// Package fdlimit keeps a server up when it runs out of file descriptors.
//
// Accept fails with EMFILE or ENFILE when the process or the system has no
// file descriptor left for the next connection. The condition passes as
// soon as a connection closes, so a server should pause and accept again,
// as net/http does; fasthttp's Serve instead returns the error, and the
// process with it. Listener wraps a listener so that its Accept pauses
// (5 ms, doubling up to 1 s) and tries again instead of failing; Backoff is
// the same pause for accept loops of one's own. Raise lifts the soft limit
// on open files to the hard limit at start-up.
package fdlimit

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// Exhausted reports whether err is a shortage that passes when
// connections close: no file descriptor left in the process (EMFILE) or
// the system (ENFILE), or no socket buffers (ENOBUFS, ENOMEM).
func Exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Pause bounds of Backoff.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = time.Second
)

// Backoff is the pause between accepts while descriptors are exhausted:
// 5 ms, doubling to 1 s. The zero value is ready; it is not safe for
// concurrent use (one accept loop owns it).
type Backoff struct{ d time.Duration }

// Wait pauses before the next accept, or until done is closed; it reports
// false if done was closed first.
func (b *Backoff) Wait(done <-chan struct{}) bool {
	if b.d == 0 {
		b.d = firstPause
	} else {
		b.d = min(2*b.d, maxPause)
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Reset starts the next shortage's pauses from 5 ms again.
func (b *Backoff) Reset() { b.d = 0 }

// Pausing reports whether the last accept found descriptors exhausted.
func (b *Backoff) Pausing() bool { return b.d != 0 }

// listener is a net.Listener whose Accept waits out exhausted descriptors.
type listener struct {
	net.Listener
	mu      sync.Mutex // serialises Accept: the backoff is the loop's
	backoff Backoff
	done    chan struct{}
	once    sync.Once
	onPause func(error)
}

// Listener returns ln with an Accept that, when descriptors are exhausted,
// pauses and tries again instead of returning the error. onPause, if not
// nil, is called with the error at the start of each shortage.
func Listener(ln net.Listener, onPause func(error)) net.Listener {
	return &listener{Listener: ln, done: make(chan struct{}), onPause: onPause}
}

func (l *listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		c, err := l.Listener.Accept()
		if err == nil || !Exhausted(err) {
			l.backoff.Reset()
			return c, err
		}
		if !l.backoff.Pausing() && l.onPause != nil {
			l.onPause(err)
		}
		if !l.backoff.Wait(l.done) {
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and ends a pause under way.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
