package main

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// adminListener holds at most max connections of the admin listener. A
// connection beyond them takes the place of the oldest one that is not
// serving a request, or has served one for longer than adminBusyGrace
// (its client does not read its answer), which is closed; when every one
// is serving a request, the new one is closed at once.
//
// Refusing the newest instead would let anyone who reaches the admin port
// keep probes out with max idle connections opened again as the read
// timeout closes them: the kubelet's liveness probe would fail and the pod
// be restarted, dropping every call. A probe or a scrape opens a
// connection and is answered within milliseconds, so taking it from such a
// crowd means opening max connections in that time.
type adminListener struct {
	net.Listener
	max int
	now func() time.Time

	mu    sync.Mutex
	conns list.List // of *adminConn, oldest first
}

func newAdminListener(ln net.Listener, max int) *adminListener {
	return &adminListener{Listener: ln, max: max, now: time.Now}
}

// adminBusyGrace is how long a connection serving a request keeps its
// place: admin answers are small and written in milliseconds, unless the
// client does not read them (until adminWriteTimeout).
const adminBusyGrace = 2 * time.Second

// Accept accepts a connection, closing the oldest one that is not serving
// a request (see adminBusyGrace) if there are max already.
func (l *adminListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ac := &adminConn{Conn: c, l: l}
		l.mu.Lock()
		var evicted *adminConn
		if l.conns.Len() >= l.max {
			now := l.now().UnixNano()
			for e := l.conns.Front(); e != nil; e = e.Next() {
				if old := e.Value.(*adminConn); !old.busy(now) {
					evicted = old
					l.removeLocked(old)
					break
				}
			}
		}
		full := l.conns.Len() >= l.max
		if !full {
			ac.elem = l.conns.PushBack(ac)
		}
		l.mu.Unlock()
		if evicted != nil {
			_ = evicted.Conn.Close() // its server goroutine ends on the error
		}
		if full {
			_ = c.Close()
			continue
		}
		return ac, nil
	}
}

// removeLocked forgets c. It requires l.mu to be held.
func (l *adminListener) removeLocked(c *adminConn) {
	if c.elem != nil {
		l.conns.Remove(c.elem)
		c.elem = nil
	}
}

// adminConn is a connection of an adminListener.
type adminConn struct {
	net.Conn
	l    *adminListener
	elem *list.Element // in l.conns; nil once forgotten; guarded by l.mu

	// busySince is when it began serving a request (Unix nanoseconds;
	// 0: it serves none): from its handler until it is idle again.
	busySince atomic.Int64
}

// busy reports whether c serves a request at now (Unix nanoseconds), and
// began it at most adminBusyGrace ago.
func (c *adminConn) busy(now int64) bool {
	since := c.busySince.Load()
	return since != 0 && now-since <= int64(adminBusyGrace)
}

// Close closes the connection and forgets it.
func (c *adminConn) Close() error {
	c.l.mu.Lock()
	c.l.removeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// serving wraps the admin handler: the connection of a request being
// served is not closed for a newcomer until its answer is written.
func serving(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if c, ok := ctx.Conn().(*adminConn); ok {
			c.busySince.Store(c.l.now().UnixNano())
		}
		h(ctx)
	}
}

// adminConnState is the admin server's ConnState hook: a connection whose
// answer has been written is no longer serving a request.
func adminConnState(c net.Conn, st fasthttp.ConnState) {
	if ac, ok := c.(*adminConn); ok && st == fasthttp.StateIdle {
		ac.busySince.Store(0)
	}
}
