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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			// Bytes waiting (a pipelined request): the client is there.
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			// Nothing to read and no EOF: alive.
		default:
			gone = true // EOF (n == 0) or a reset
		}
		return true // never wait for readability
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A read deadline on the connection (a drain's) says nothing
		// about the peer.
		return gone
	}
	return gone || err != nil
}
