package proxy

import (
	"net"
	"sync"
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
type connTracker struct {
	mu    sync.Mutex
	conns map[net.Conn]connInfo
}

type connInfo struct {
	busy   bool // a handler has taken a request from it and not yet answered
	nudged bool // its read deadline was shortened by a drain
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[net.Conn]connInfo{}}
}

// state is the fasthttp.Server.ConnState hook.
func (t *connTracker) state(c net.Conn, st fasthttp.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case fasthttp.StateNew:
		t.conns[c] = connInfo{}
	case fasthttp.StateIdle:
		info := t.conns[c]
		info.busy = false
		t.conns[c] = info
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(t.conns, c)
	}
}

// busy marks c as carrying a call until its answer has been written.
func (t *connTracker) busy(c net.Conn) {
	t.mu.Lock()
	info := t.conns[c]
	info.busy = true
	t.conns[c] = info
	t.mu.Unlock()
}

// nudgeSilent gives every connection that carries no call, and was not
// nudged before, a read deadline grace ahead.
func (t *connTracker) nudgeSilent(grace time.Duration) {
	deadline := time.Now().Add(grace)
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, info := range t.conns {
		if info.busy || info.nudged {
			continue
		}
		_ = c.SetReadDeadline(deadline)
		info.nudged = true
		t.conns[c] = info
	}
}
