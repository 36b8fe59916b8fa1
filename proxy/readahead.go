package proxy

import (
	"io"
	"sync"
)

// A keep-alive connection of fasthttp's server with ReduceMemoryUsage holds
// no read buffer between requests: it waits for the next request with a
// Read of one byte, then takes a buffer from its pool and reads the rest.
// That costs two read system calls per request where one would do.
//
// On Linux, clientConn reads ahead at that one-byte Read: it waits until
// the socket is readable holding no buffer (an idle connection keeps none),
// then reads whatever has arrived (most requests arrive whole) into a
// buffer of its pool, returns the first byte, and serves the rest to
// fasthttp's next Read, which fills fasthttp's read buffer; the buffer then
// goes back to the pool. One system call per request, and still no buffer
// held while a call waits: fasthttp's next Read takes up to its read
// buffer's size, at least readAheadSize.

// readAheadSize is the most a one-byte Read reads ahead: at most fasthttp's
// smallest read buffer (its default, 4 KiB), so that fasthttp's next Read
// empties it.
const readAheadSize = 4 << 10

// readAhead holds the bytes read ahead of a connection's reader: buf[r:w].
type readAhead struct {
	buf  [readAheadSize]byte
	r, w int
}

var readAheads = sync.Pool{New: func() any { return new(readAhead) }}

// Read reads from the connection, counts the bytes it returns (see
// clientConn.received) and scans those of a request head (see headScan).
// Once a head has a line that ends in a bare LF, it fails: fasthttp would
// otherwise wait for the rest of a head that has ended. (fasthttp reads
// again only for that head or one after it: the bytes of the requests
// before it have all been read.) Only the goroutine
// that serves the connection reads from it (see Close).
func (c *clientConn) Read(p []byte) (int, error) {
	if c.head.bareLF {
		return 0, errBareLF
	}
	if len(p) == 1 && c.ahead == nil {
		c.head.startRequest() // fasthttp reads a request's first byte alone
	}
	n, err := c.read(p)
	c.received.Add(int64(n))
	c.head.scan(p[:n])
	return n, err
}

func (c *clientConn) read(p []byte) (int, error) {
	if a := c.ahead; a != nil {
		n := copy(p, a.buf[a.r:a.w])
		a.r += n
		if a.r == a.w {
			c.ahead = nil
			readAheads.Put(a)
		}
		return n, nil
	}
	if len(p) != 1 {
		return c.TCPConn.Read(p)
	}
	return c.readFirst(p)
}

// keepAhead returns the first of the n bytes that a read put in a and
// keeps the rest for the next Read; a goes back to the pool when n is 1.
func (c *clientConn) keepAhead(p []byte, a *readAhead, n int) int {
	p[0] = a.buf[0]
	if n == 1 {
		readAheads.Put(a)
		return 1
	}
	a.r, a.w = 1, n
	c.ahead = a
	return 1
}

// WriteTo copies the connection to w until EOF or an error, the bytes read
// ahead first. (net.TCPConn's own WriteTo, which would otherwise be
// promoted, reads the socket and would skip them.)
func (c *clientConn) WriteTo(w io.Writer) (int64, error) {
	var written int64
	if a := c.ahead; a != nil {
		n, err := w.Write(a.buf[a.r:a.w])
		written += int64(n)
		a.r += n
		if err != nil {
			return written, err
		}
		c.ahead = nil
		readAheads.Put(a)
	}
	n, err := c.TCPConn.WriteTo(w)
	return written + n, err
}
