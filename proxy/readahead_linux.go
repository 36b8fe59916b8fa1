package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// readFirst reads ahead for a one-byte Read (see readahead.go): the wait
// for the socket to be readable holds no buffer.
func (c *clientConn) readFirst(p []byte) (int, error) {
	if c.raw == nil {
		raw, err := c.TCPConn.SyscallConn()
		if err != nil {
			return c.TCPConn.Read(p)
		}
		c.raw, c.readReady = raw, c.readArrived // one method value per connection
	}
	c.arrived, c.arrivedN, c.arrivedErr = nil, 0, nil
	if err := c.raw.Read(c.readReady); err != nil { // a deadline, or the connection closed
		return 0, c.readError(err)
	}
	a, n, err := c.arrived, c.arrivedN, c.arrivedErr
	c.arrived = nil
	switch {
	case err != nil:
		readAheads.Put(a)
		return 0, c.readError(os.NewSyscallError("read", err))
	case n == 0:
		readAheads.Put(a)
		return 0, io.EOF
	}
	return c.keepAhead(p, a, n), nil
}

// readArrived reads what has arrived on the socket fd into a buffer of the
// pool, and reports false, holding no buffer, when nothing has: the
// netpoller then waits for the socket to be readable and calls it again.
func (c *clientConn) readArrived(fd uintptr) bool {
	a := readAheads.Get().(*readAhead)
	for {
		n, err := syscall.Read(int(fd), a.buf[:])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			readAheads.Put(a)
			return false
		}
		c.arrived, c.arrivedN, c.arrivedErr = a, max(n, 0), err
		return true
	}
}

// readError is the error of a read that failed with err, as net.TCPConn's
// Read reports it.
func (c *clientConn) readError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
