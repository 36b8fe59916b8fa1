// Package rawupstream is, for tests, a provider on a raw socket: it reads
// each request's head by hand and leaves the answer to the test, so that a
// test can send what no HTTP server would (a body cut short, a reset after
// the head, garbage) and see the request line exactly as Governor sent it.
package rawupstream

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Start listens on a port of its own until the test ends. Each connection
// it accepts reads one request's head and is answered by answer, given the
// request line (with its CRLF) and the count of requests so far (1 for the
// first), then closed; the body of the request, if any, is not read. Start
// returns the address it listens on, host:port.
func Start(t testing.TB, answer func(c *net.TCPConn, line string, n int)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			for h := line; err == nil && h != "\r\n"; { // the rest of the head
				h, err = br.ReadString('\n')
			}
			answer(c.(*net.TCPConn), line, int(n.Add(1)))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}
