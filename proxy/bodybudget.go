package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// bodyBudget counts the bytes of request bodies held by calls under way,
// against Config.MaxBufferedBytes. Safe for concurrent use.
//
// A request reserves its body's bytes when its head arrives, before its
// body is read (see headerReceived), so that many clients sending large
// bodies at once cannot make Governor read them all: one that would not
// fit is refused then. A body announced by Content-Length reserves its
// length (its reader allocates it at once); a chunked one MaxBodyBytes,
// or what is left if less, which then bounds it. Its handler then holds
// the reservation as its body's bytes, giving back what the body did not
// use; a request that fails before its handler (a cut body, a read
// timeout) gives the reservation back in serverError, and one that ends
// in neither way is given back at its deadline, when reading it can no
// longer go on.
//
// A reservation is kept only by a body that arrives at the pace that ends
// it by its deadline (the read timeout), give or take paceSlack: when a
// request would not fit, bodies behind that pace give their room up, the
// furthest behind first, and their connections are cut (see evictLocked).
// So clients that announce large bodies and send them slowly, or not at
// all, cannot hold the budget for the read timeout: holding it takes
// sending the bytes, much as if the budget counted bytes received.
type bodyBudget struct {
	max  int64
	held atomic.Int64 // bytes held and reserved

	mu       sync.Mutex
	reserved map[*fasthttp.RequestHeader]reservation // bodies being read
}

// reservation is the room a request's head reserved for its body.
type reservation struct {
	n        int64
	start    time.Time // when its head arrived
	deadline time.Time // its body has been read, or failed, by then

	// conn is the connection the body arrives on, nil if it cannot be
	// followed; the body's bytes received so far are conn.received - base.
	conn *clientConn
	base int64
}

// behind returns how many bytes r's body is behind the pace that ends it
// by its deadline, at now: 0 or less when it is on pace, or when its
// connection cannot be followed.
func (r reservation) behind(now time.Time) int64 {
	span := r.deadline.Sub(r.start)
	if r.conn == nil || span <= 0 {
		return 0
	}
	due := int64(float64(r.n) * min(float64(now.Sub(r.start))/float64(span), 1))
	return due - (r.conn.received.Load() - r.base)
}

// take takes n bytes and reports true, or takes none and reports false
// when they do not fit.
func (b *bodyBudget) take(n int64) bool {
	if b.held.Add(n) <= b.max {
		return true
	}
	b.held.Add(-n)
	return false
}

// give gives back n bytes taken.
func (b *bodyBudget) give(n int64) { b.held.Add(-n) }

// reserve reserves n bytes for the body of the request whose head is h,
// arriving on conn (nil if unknown) from received byte base, to be read
// by deadline, and reports whether they fit. A reservation left on h by
// an earlier request of its connection, reservations past their deadline
// at now and, if that is not enough, bodies behind their pace are given
// back first.
func (b *bodyBudget) reserve(h *fasthttp.RequestHeader, n int64, conn *clientConn, base int64, now, deadline time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelLocked(h)
	if !b.take(n) {
		for k, r := range b.reserved {
			if now.After(r.deadline) {
				delete(b.reserved, k)
				b.give(r.n)
			}
		}
		if !b.take(n) && !b.evictLocked(n, now) {
			return false
		}
	}
	if b.reserved == nil {
		b.reserved = make(map[*fasthttp.RequestHeader]reservation)
	}
	b.reserved[h] = reservation{n: n, start: now, deadline: deadline, conn: conn, base: base}
	return true
}

// paceSlack is how far behind its pace a body may fall and keep its room:
// a body's first bytes may take longer (a TCP connection's slow start, a
// client that writes its head and body apart), and a body no larger may
// take the whole read timeout. So holding the budget by sending nothing
// takes a connection per paceSlack bytes held (4,096 for 256 MiB), and
// MaxConnections bounds those.
const paceSlack = 64 << 10

// evictLocked takes n bytes by giving back the reservations of bodies more
// than paceSlack behind their pace at now, the furthest behind first, and cutting their
// connections; it evicts none and reports false if those would not make
// room enough. It requires b.mu to be held.
//
// A cut connection's read fails at once, so fasthttp drops the body it
// was reading and the request ends in serverError, which finds no
// reservation to give back. If the body ended just before the cut, its
// handler finds none to claim and takes its bytes anew, or refuses the
// call.
func (b *bodyBudget) evictLocked(n int64, now time.Time) bool {
	type late struct {
		h      *fasthttp.RequestHeader
		behind int64
	}
	var lates []late
	var room int64
	for h, r := range b.reserved {
		if d := r.behind(now); d > paceSlack {
			lates = append(lates, late{h, d})
			room += r.n
		}
	}
	if b.max-b.held.Load()+room < n {
		return false
	}
	slices.SortFunc(lates, func(x, y late) int { return cmp.Compare(y.behind, x.behind) })
	for _, l := range lates {
		r := b.reserved[l.h]
		delete(b.reserved, l.h)
		b.give(r.n)
		r.conn.tooSlow.Store(true)
		_ = r.conn.TCPConn.SetReadDeadline(time.Unix(1, 0))
		if b.take(n) {
			return true
		}
	}
	return false
}

// claim ends the reservation of the request whose head is h and returns
// its bytes, which stay held: the caller gives them back. It returns 0
// when h has none.
func (b *bodyBudget) claim(h *fasthttp.RequestHeader) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.reserved[h]
	if !ok {
		return 0
	}
	delete(b.reserved, h)
	return r.n
}

// refuse records that the request whose head is h was refused room for
// its body, as a reservation of no bytes (see cancel) that lasts until
// deadline, as long as reading the body can go on: serverError then
// answers it buffers_full, however long its bytes take to come.
func (b *bodyBudget) refuse(h *fasthttp.RequestHeader, deadline time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelLocked(h)
	if b.reserved == nil {
		b.reserved = make(map[*fasthttp.RequestHeader]reservation)
	}
	b.reserved[h] = reservation{deadline: deadline}
}

// free returns the bytes the budget has left.
func (b *bodyBudget) free() int64 { return b.max - b.held.Load() }

// cancel gives back the reservation of the request whose head is h, if
// any, and returns how many bytes it held and whether there was one.
func (b *bodyBudget) cancel(h *fasthttp.RequestHeader) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cancelLocked(h)
}

// cancelLocked is cancel. It requires b.mu to be held.
func (b *bodyBudget) cancelLocked(h *fasthttp.RequestHeader) (int64, bool) {
	r, ok := b.reserved[h]
	if ok {
		delete(b.reserved, h)
		b.give(r.n)
	}
	return r.n, ok
}

// hold makes the body of n bytes held by a request's handler, whose head
// reserved the given bytes, and reports whether it fits; if not, nothing
// is held. The caller gives back n bytes once it reports true.
func (b *bodyBudget) hold(reserved, n int64) bool {
	if n <= reserved {
		b.give(reserved - n)
		return true
	}
	if b.take(n - reserved) {
		return true
	}
	b.give(reserved)
	return false
}

// headerReceived is the fasthttp.Server.HeaderReceived hook: a body is
// reserved room before it is read, its Content-Length, or for a chunked
// body, whose length is unknown, MaxBodyBytes, or what the budget has left
// if less, which then bounds the body. A body that finds no room is not
// read: fasthttp fails the request with ErrBodyTooLarge, which serverError
// answers with buffersFull (a chunked body beyond the room it was given
// too). The server's ReadTimeout bounds reading the head and the body, so
// the reservation's deadline is that far from now.
//
// A request that asked for 100 Continue (Expect: 100-continue) and whose
// body is refused here, or over MaxBodyBytes, gets the refusal instead,
// before it sends its body (RFC 9110 §10.1.1 lets a server answer such a
// request with its final status); one in HTTP/1.0 gets no 100 Continue, a
// 1xx that HTTP/1.0 does not have, and is read as any other.
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if !h.IsHTTP11() {
		h.Del(fasthttp.HeaderExpect) // ignored in HTTP/1.0 (RFC 9110 §10.1.1)
	}
	n := int64(h.ContentLength())
	chunked := n == -1
	if chunked {
		n = int64(p.cfg.MaxBodyBytes)
	}
	if n <= 0 || n > int64(p.cfg.MaxBodyBytes) {
		p.budget.cancel(h)
		if n > 0 {
			h.Del(fasthttp.HeaderExpect) // fasthttp then refuses it unread
		}
		return fasthttp.RequestConfig{}
	}
	conn, _ := requestCtxOf(h).Conn().(*clientConn)
	var base int64
	if conn != nil {
		// The body's first bytes may have come in the reads of its head.
		base = conn.requestStart + headLen(h)
	}
	now := p.cfg.Now()
	deadline := now.Add(p.cfg.ReadTimeout)
	if p.budget.reserve(h, n, conn, base, now, deadline) {
		return fasthttp.RequestConfig{}
	}
	if free := p.budget.free(); chunked && free > 0 && p.budget.reserve(h, free, conn, base, now, deadline) {
		return fasthttp.RequestConfig{MaxRequestBodySize: int(free)}
	}
	p.budget.refuse(h, deadline)
	h.Del(fasthttp.HeaderExpect)
	return fasthttp.RequestConfig{MaxRequestBodySize: 1}
}

// requestCtxOf returns the RequestCtx whose request head h is.
//
// fasthttp's Server calls HeaderReceived with &ctx.Request.Header of the
// RequestCtx that serves the connection, and with nothing else: this is
// the way from the hook to the connection whose body it reserves room
// for. TestRequestCtxOfHeader checks it against the fasthttp in go.mod.
// Only headerReceived may call it.
func requestCtxOf(h *fasthttp.RequestHeader) *fasthttp.RequestCtx {
	return (*fasthttp.RequestCtx)(unsafe.Add(unsafe.Pointer(h), -int(requestHeaderOffset)))
}

// requestHeaderOffset is the offset of ctx.Request.Header in a RequestCtx.
const requestHeaderOffset = unsafe.Offsetof(fasthttp.RequestCtx{}.Request) + unsafe.Offsetof(fasthttp.Request{}.Header)

// headLen returns how many bytes the request head h took on the wire:
// its request line and its header lines, the empty line included.
func headLen(h *fasthttp.RequestHeader) int64 {
	return int64(len(h.Method()) + len(h.RequestURI()) + len(h.Protocol()) + len("  \r\n") + len(h.RawHeaders()))
}

// buffersFull is the error of a call refused for want of room in the
// budget: bodies held by other calls will be released as they end.
func (p *Proxy) buffersFull() apiError {
	return apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeBuffersFull, RetryAfter: 1,
		Message: fmt.Sprintf("request bodies held by calls under way would go beyond %d bytes; retry later", p.cfg.MaxBufferedBytes)}
}

// HoldBodies takes n bytes of the MaxBufferedBytes budget for request
// bodies held outside the handler of their request (an async batch job's
// items), and reports whether it did: it takes nothing, and reports false,
// when they do not fit. ReleaseBodies gives them back.
func (p *Proxy) HoldBodies(n int64) bool { return p.budget.take(n) }

// ReleaseBodies gives back n bytes taken by HoldBodies.
func (p *Proxy) ReleaseBodies(n int64) { p.budget.give(n) }

// BuffersFullError is the error of work refused because its bodies do not
// fit the MaxBufferedBytes budget: 503 buffers_full; retry after a second.
func (p *Proxy) BuffersFullError() *Error {
	e := p.buffersFull()
	return &Error{Status: e.Status, Code: e.Code, Message: e.Message}
}

// refuseBuffersFull answers ctx with buffersFull, in Anthropic's shape on
// its routes.
func (p *Proxy) refuseBuffersFull(ctx *fasthttp.RequestCtx) {
	p.writeError(ctx, p.anthropicShaped(ctx), p.buffersFull())
}
