package proxy

import (
	"fmt"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
)

// bodyBudget counts the bytes of request bodies held by calls under way,
// against Config.MaxBufferedBytes. Safe for concurrent use.
//
// A request announces its body with Content-Length, and one that would not
// fit is refused before its body is read (see headerReceived); a body read
// whole (chunked, or one that fitted when its head arrived but not once
// read) takes its bytes when its handler starts, or is refused then. Bodies
// being read are not counted: they are bounded by the connections and
// MaxBodyBytes.
type bodyBudget struct {
	max  int64
	held atomic.Int64
}

// fits reports whether n more bytes would fit now.
func (b *bodyBudget) fits(n int64) bool { return b.held.Load()+n <= b.max }

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

// headerReceived is the fasthttp.Server.HeaderReceived hook: a body whose
// Content-Length does not fit the budget is not read. fasthttp then fails
// the request with ErrBodyTooLarge, which serverError answers with
// buffersFull (the length is within MaxBodyBytes).
func (p *Proxy) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if n := h.ContentLength(); n > 0 && n <= p.cfg.MaxBodyBytes && !p.budget.fits(int64(n)) {
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
	up, _ := p.router.resolve(ctx.Path())
	anthropic := up.anthropic || len(ctx.Request.Header.Peek("Anthropic-Version")) > 0
	reply.WriteError(ctx, anthropic, p.buffersFull())
}
