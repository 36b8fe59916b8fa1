package proxy

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
)

// bodyBudget counts the bytes of request bodies held by calls under way,
// against Config.MaxBufferedBytes. Safe for concurrent use.
//
// A request that announces its body with Content-Length reserves its bytes
// when its head arrives, before its body is read (see headerReceived), so
// that many clients sending large bodies at once cannot make Governor read
// them all: one that would not fit is refused then. Its handler then holds
// the reservation as its body's bytes; a request that fails before its
// handler (a cut body, a read timeout) gives the reservation back in
// serverError, and one that ends in neither way is given back at its
// deadline, when reading it can no longer go on. A body of unknown length
// (chunked) takes its bytes when its handler starts, or is refused then.
type bodyBudget struct {
	max  int64
	held atomic.Int64 // bytes held and reserved

	mu       sync.Mutex
	reserved map[*fasthttp.RequestHeader]reservation // bodies being read
}

// reservation is the room a request's head reserved for its body.
type reservation struct {
	n        int64
	deadline time.Time // its body has been read, or failed, by then
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
// to be read before deadline, and reports whether they fit. A reservation
// left on h by an earlier request of its connection, and reservations past
// their deadline at now, are given back first.
func (b *bodyBudget) reserve(h *fasthttp.RequestHeader, n int64, now, deadline time.Time) bool {
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
		if !b.take(n) {
			return false
		}
	}
	if b.reserved == nil {
		b.reserved = make(map[*fasthttp.RequestHeader]reservation)
	}
	b.reserved[h] = reservation{n: n, deadline: deadline}
	return true
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

// cancel gives back the reservation of the request whose head is h, if any.
func (b *bodyBudget) cancel(h *fasthttp.RequestHeader) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancelLocked(h)
}

// cancelLocked is cancel. It requires b.mu to be held.
func (b *bodyBudget) cancelLocked(h *fasthttp.RequestHeader) {
	if r, ok := b.reserved[h]; ok {
		delete(b.reserved, h)
		b.give(r.n)
	}
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

// headerReceived is the fasthttp.Server.HeaderReceived hook: a body whose
// Content-Length fits the budget is reserved room before it is read; one
// that does not fit is not read. fasthttp then fails the request with
// ErrBodyTooLarge, which serverError answers with buffersFull (the length
// is within MaxBodyBytes). The server's ReadTimeout bounds reading the
// head and the body, so the reservation's deadline is that far from now.
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	n := h.ContentLength()
	if n <= 0 || n > p.cfg.MaxBodyBytes {
		p.budget.cancel(h)
		return fasthttp.RequestConfig{}
	}
	now := p.cfg.Now()
	if !p.budget.reserve(h, int64(n), now, now.Add(p.cfg.ReadTimeout)) {
		return fasthttp.RequestConfig{MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
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
	reply.WriteError(ctx, p.anthropicShaped(ctx), p.buffersFull())
}
