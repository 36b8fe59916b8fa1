package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// silentConnGrace is how long, once a drain has begun, a client
// connection that carries no call may stay silent before it is closed.
const silentConnGrace = time.Second

// connTracker knows which client connections carry a call, so that a drain
// can close the ones that do not.
//
// fasthttp counts a connection as active from the moment it is accepted
// until its first request has been answered, so a client that connects and
// sends nothing (Go's http.Transport dials ahead and may park the spare
// connection) holds Shutdown for the whole ReadTimeout. During a drain,
// every connection that carries no call gets a read deadline silentConnGrace
// ahead, once: a request that arrives in time is served, silence ends the
// connection.
//
// The map changes only when a connection opens or closes. Whether it carries
// a call changes with every request, and is kept in its connInfo without the
// lock: the connInfo of a clientConn is part of the connection, so a request
// touches neither the lock nor the map.
type connTracker struct {
	mu    sync.Mutex
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	busy   atomic.Bool // a handler has taken a request from it and not yet answered
	nudged bool        // its read deadline was shortened by a drain; guarded by connTracker.mu
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[net.Conn]*connInfo{}}
}

// state is the fasthttp.Server.ConnState hook.
func (t *connTracker) state(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		info := &connInfo{}
		if cc, ok := c.(*clientConn); ok {
			info = &cc.info
		}
		t.mu.Lock()
		t.conns[c] = info
		t.mu.Unlock()
	case fasthttp.StateActive:
		// The first bytes of a request have been read; its head follows.
		if cc, ok := c.(*clientConn); ok {
			cc.requestStart = cc.received.Load()
			cc.tooSlow.Store(false)
		}
	case fasthttp.StateIdle:
		if info := t.info(c); info != nil {
			info.busy.Store(false)
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		t.mu.Lock()
		delete(t.conns, c)
		t.mu.Unlock()
	}
}

// count returns how many client connections are open.
func (t *connTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// info returns the connInfo of c: its own for a clientConn, else the
// map's (nil if c is not tracked).
func (t *connTracker) info(c net.Conn) *connInfo {
	if cc, ok := c.(*clientConn); ok {
		return &cc.info
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns[c]
}

// busy marks c as carrying a call until its answer has been written.
func (t *connTracker) busy(c net.Conn) {
	if info := t.info(c); info != nil {
		info.busy.Store(true)
	}
}

// closeAll closes every client connection still open, at once (no
// lingering): at the end of a drain, those whose clients do not read their
// answers.
func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		if cc, ok := c.(*clientConn); ok {
			// fasthttp closes it again when its write fails, which
			// counts it out of its listener's open connections.
			_ = cc.TCPConn.Close()
			continue
		}
		_ = c.Close()
	}
}

// nudgeSilent gives every connection that carries no call, and was not
// nudged before, a read deadline grace ahead.
func (t *connTracker) nudgeSilent(grace time.Duration) {
	deadline := time.Now().Add(grace)
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, info := range t.conns {
		if info.busy.Load() || info.nudged {
			continue
		}
		_ = c.SetReadDeadline(deadline)
		info.nudged = true
	}
}
