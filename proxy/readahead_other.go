//go:build !linux

package proxy

// readFirst reads from the socket: elsewhere than on Linux, nothing is
// read ahead.
func (c *clientConn) readFirst(p []byte) (int, error) { return c.TCPConn.Read(p) }
