package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// peerGone reports whether the peer of c has closed or reset the
// connection. It peeks at the socket (MSG_PEEK|MSG_DONTWAIT) without
// consuming a byte, the way database drivers detect dead connections:
// fasthttp only notices a departed client when a write to it fails, which
// for a call waiting in the queue or a stalled stream may be minutes later.
func peerGone(c net.Conn) bool {
	_, gone := peek(c)
	return gone
}

// peek reports, without consuming a byte or waiting, whether bytes wait to
// be read from c, and whether its peer has closed or reset it.
func peek(c net.Conn) (waiting, gone bool) { return newPeeker(c).peek() }

// A peeker peeks at one connection's socket. Made once for a connection
// looked at again and again, it allocates nothing per look.
type peeker struct {
	rc      syscall.RawConn // nil: not a socket (or unreadable, if rcErr)
	rcErr   bool
	look    func(fd uintptr) bool // p.recv, bound once
	buf     [1]byte
	waiting bool
	gone    bool
}

func newPeeker(c net.Conn) *peeker {
	p := &peeker{}
	if sc, ok := c.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		p.rc, p.rcErr = rc, err != nil
	}
	p.look = p.recv
	return p
}

// peek is the package's peek of the peeker's connection. Only one
// goroutine at a time may call it.
func (p *peeker) peek() (waiting, gone bool) {
	switch {
	case p.rcErr:
		return false, true
	case p.rc == nil:
		return false, false
	}
	p.waiting, p.gone = false, false
	err := p.rc.Read(p.look)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A read deadline on the connection (a drain's) says nothing
		// about the peer.
		return p.waiting, p.gone
	}
	return p.waiting, p.gone || err != nil
}

func (p *peeker) recv(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case n > 0:
		p.waiting = true // a client's pipelined request, say
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		// Nothing to read and no EOF: alive.
	default:
		p.gone = true // EOF (n == 0) or a reset
	}
	return true // never wait for readability
}
