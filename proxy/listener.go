package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
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
type drainListener struct {
	*net.TCPListener
	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// listenerFor wraps ln when it is a TCP listener.
func listenerFor(ln net.Listener) net.Listener {
	if tl, ok := ln.(*net.TCPListener); ok {
		return &drainListener{TCPListener: tl}
	}
	return ln
}

// Close starts the grace period; Accept closes the socket when it ends.
func (l *drainListener) Close() error {
	if l.closing.Swap(true) {
		return nil
	}
	return l.TCPListener.SetDeadline(time.Now().Add(acceptGrace))
}

// Accept accepts connections, including during the grace period; after it,
// it closes the socket and reports net.ErrClosed.
func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.TCPListener.Accept()
	if err != nil && l.closing.Load() {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
			l.closeOnce.Do(func() { l.closeErr = l.TCPListener.Close() })
			return nil, net.ErrClosed
		}
	}
	return c, err
}
