package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// acceptable answers, and reports false for, a request that is not an
// HTTP/1.x call Governor may forward: a method other than allowedMethods
// (TRACE, CONNECT, PRI: HTTP/2's preface) gets 405 with an Allow header,
// another HTTP version 400, and the connection is closed. The error takes
// the shape of the provider the path routes to.
func (p *Proxy) acceptable(ctx *fasthttp.RequestCtx) bool {
	h := &ctx.Request.Header
	refuse := func(status int, code, msg string) bool {
		ctx.SetConnectionClose()
		p.writeError(ctx, p.anthropicShaped(ctx), apiError{Status: status, Code: code, Final: true, Message: msg})
		return false
	}
	if c, ok := ctx.Conn().(*clientConn); ok && c.head.refuses(ctx.ConnRequestNum()) {
		// Read whole at once, with a CR LF CR LF after its end (in its
		// body): refused as one that fasthttp waited on is. First, so
		// that every request tells the scan it is handled.
		return refuse(fasthttp.StatusBadRequest, CodeBadRequest, bareLFMessage)
	}
	if m := h.Method(); !allowedMethod(m) {
		ctx.Response.Header.Set(fasthttp.HeaderAllow, allowedMethods)
		return refuse(fasthttp.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("Governor does not serve %.16s requests", m))
	}
	if string(h.RequestURI()) == "*" {
		// The asterisk form asks about Governor itself, never about a
		// provider's path (fasthttp reads it as the path "/*").
		if !h.IsOptions() {
			return refuse(fasthttp.StatusBadRequest, CodeBadRequest, "the request target * is only for OPTIONS (RFC 9112 §3.2.4)")
		}
		ctx.Response.Header.Set(fasthttp.HeaderAllow, allowedMethods)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return false
	}
	if proto := h.Protocol(); string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0" {
		return refuse(fasthttp.StatusBadRequest, CodeBadRequest, fmt.Sprintf("Governor serves HTTP/1.0 and HTTP/1.1, not %.16q", proto))
	}
	if name := invalidFieldName(h.RawHeaders()); name != nil {
		return refuse(fasthttp.StatusBadRequest, CodeBadRequest, fmt.Sprintf("header field name %.40q is not a token (RFC 9110 §5.6.2)", name))
	}
	return true
}

// bareLFMessage answers a request head with a line that ends in a bare LF
// (see headScan).
const bareLFMessage = "request head lines must end in CR LF, not a bare LF (RFC 9112 §2.2)"

// allowedMethods are the methods Governor serves and forwards: those of
// the providers' APIs and of CORS preflights. The others are refused, not
// forwarded: TRACE would have the provider echo the request, credentials
// included, back into a page's script (cross-site tracing), CONNECT would
// ask for a tunnel, and an LLM API serves none of them.
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// allowedMethod reports whether m is one of allowedMethods. Methods are
// case-sensitive (RFC 9110 §9.1).
func allowedMethod(m []byte) bool {
	switch string(m) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodPost, fasthttp.MethodPut,
		fasthttp.MethodPatch, fasthttp.MethodDelete, fasthttp.MethodOptions:
		return true
	}
	return false
}

// invalidFieldName returns the first field name of a raw header block, as
// fasthttp read it, that is not a token (RFC 9110 §5.6.2), or nil.
// fasthttp takes a name with a space inside; an upstream that ends a name
// at the space would read "Transfer-Encoding x: chunked" as framing that
// Governor did not frame the request by, and take the rest of its body as
// another request on a connection other clients' calls share. RFC 9112
// §5.1 has such requests refused.
func invalidFieldName(raw []byte) []byte {
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte{'\n'})
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' || line[0] == '\r' {
			continue // the rest of a folded value, or the end of the block
		}
		name, _, _ := bytes.Cut(line, []byte{':'})
		for _, c := range name {
			if !tokenChar[c] {
				return name
			}
		}
	}
	return nil
}

// tokenChar marks the bytes of RFC 9110's tchar.
var tokenChar = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
	}
	return t
}()

// framedTwice reports whether a request's raw headers name both
// Content-Length and Transfer-Encoding. (fasthttp drops Transfer-Encoding
// and sets the length once it has read a chunked body, so only the raw
// block tells.)
func framedTwice(raw []byte) bool {
	var length, te bool
	for len(raw) > 0 && !(length && te) {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte{'\n'})
		name, _, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		length = length || bytes.EqualFold(name, []byte(fasthttp.HeaderContentLength))
		te = te || bytes.EqualFold(name, []byte(fasthttp.HeaderTransferEncoding))
	}
	return length && te
}

// dropTrailerFields removes from a request read whole the fields that came
// in the trailer of its chunked body: fasthttp adds them to the header
// section, where Governor would read them (x-api-key, X-Governor-Tenant,
// Priority) and forward them as header fields to the provider, past a
// proxy in front that vets header fields and passes trailers on. RFC 9110
// §6.5.1 has a trailer field merged into the header section only when its
// definition allows it; Governor sends the body with its length and no
// trailer, so they are dropped, as nginx drops them. A trailer field is
// one the head's raw block does not name (fasthttp adds Content-Length
// itself once the body is read).
func dropTrailerFields(h *fasthttp.RequestHeader) {
	raw := h.RawHeaders()
	if !rawHeaderNamed(raw, []string{fasthttp.HeaderTransferEncoding}) {
		return // not chunked: no trailer
	}
	var drop [][]byte
	for k := range h.All() {
		if !bytes.EqualFold(k, []byte(fasthttp.HeaderContentLength)) && !rawHeaderNamed(raw, []string{string(k)}) {
			drop = append(drop, bytes.Clone(k))
		}
	}
	for _, k := range drop {
		h.DelBytes(k)
	}
}

// serverError answers requests fasthttp could not read.
func (p *Proxy) serverError(ctx *fasthttp.RequestCtx, err error) {
	reserved, ok := p.budget.cancel(&ctx.Request.Header)
	// A previous answer on this keep-alive connection may have left its
	// write deadline.
	_ = ctx.Conn().SetWriteDeadline(time.Time{})
	if errors.Is(err, fasthttp.ErrBodyTooLarge) && ok && reserved < int64(p.cfg.MaxBodyBytes) {
		// Refused by headerReceived, or a chunked body beyond the room
		// it was given: it would not fit the budget.
		if c, ok := ctx.Conn().(*clientConn); ok {
			c.lingerOnClose()
		}
		ctx.SetConnectionClose()
		p.refuseBuffersFull(ctx)
		return
	}
	anthropic := p.anthropicShaped(ctx)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		// The rest of the body may still be on its way: without a
		// lingering close the client would see a reset, not this answer.
		if c, ok := ctx.Conn().(*clientConn); ok {
			c.lingerOnClose()
		}
		p.writeError(ctx, anthropic, apiError{Status: fasthttp.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Final: true,
			Message: fmt.Sprintf("request body larger than %d bytes", p.cfg.MaxBodyBytes)})
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		// The rest of the head may still be on its way: without a
		// lingering close the client could see a reset, not this answer.
		if c, ok := ctx.Conn().(*clientConn); ok {
			c.lingerOnClose()
		}
		p.writeError(ctx, anthropic, apiError{Status: fasthttp.StatusRequestHeaderFieldsTooLarge, Code: CodeBadRequest, Final: true,
			Message: fmt.Sprintf("request head larger than %d bytes", requestHeadBufferSize)})
		return
	}
	if errors.Is(err, errBareLF) {
		p.writeError(ctx, anthropic, apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Final: true, Message: bareLFMessage})
		return
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		msg := "timed out reading the request"
		if c, ok := ctx.Conn().(*clientConn); ok && c.tooSlow.Load() {
			msg = fmt.Sprintf("request body arriving too slowly to end within %s, while other calls needed its room", p.cfg.ReadTimeout)
		}
		p.writeError(ctx, anthropic, apiError{Status: fasthttp.StatusRequestTimeout, Code: CodeBadRequest, Message: msg})
		return
	}
	p.writeError(ctx, anthropic, apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Final: true,
		Message: "malformed HTTP request"})
}

// anthropicShaped reports whether Governor's own errors to ctx take
// Anthropic's shape: its route is Anthropic's, or it carries an
// anthropic-version header, as Anthropic's SDKs send.
func (p *Proxy) anthropicShaped(ctx *fasthttp.RequestCtx) bool {
	up, _ := p.router.resolve(ctx.Path())
	return up.anthropic || len(ctx.Request.Header.Peek("Anthropic-Version")) > 0
}
