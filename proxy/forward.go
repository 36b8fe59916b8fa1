package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/lane"
)

// Request headers Governor reads.
const (
	// HeaderPriority is RFC 9218's Priority; its urgency u=0..7 orders
	// the lane's queue.
	HeaderPriority = "Priority"
	// HeaderMaxRetries overrides the retry budget of one call.
	HeaderMaxRetries = "X-Governor-Max-Retries"
)

// forward sends a call to its upstream under its lane's governance and the
// answer back.
//
// A call that waits in its lane's queue holds fasthttp's goroutine for the
// wait, and that goroutine's stack is most of what a waiting call costs. Go
// doubles a stack that runs out and halves it at a GC only while three
// quarters of it are unused, so the deepest point a call reaches before and
// during its wait decides whether its goroutine keeps 4 KiB or 8 KiB for the
// whole wait; fasthttp's own frames take 1 KiB of it, and a stack must keep
// almost 1 KiB free. So the frames on the stack while a call waits are
// small: choosing the lane (admit), each attempt (governedCall.try) and
// writing the answer (answer) are done in functions that are not on the
// stack while the call waits.
func (p *Proxy) forward(ctx *fasthttp.RequestCtx) {
	p.metrics.inFlight.Add(1)
	var c governedCall
	anthropic, ok := p.admit(ctx, &c)
	if !ok {
		return
	}
	c.run(p.ctx)
	p.answer(ctx, &c, anthropic)
}

// admit prepares c for the call of ctx, and reports whether the call's
// errors take Anthropic's shape. It answers the call at once, and reports
// !ok, when the call is refused (a malformed or repeated
// X-Governor-Max-Retries or X-Governor-Tenant) or
// gets no lane.
//
//go:noinline
func (p *Proxy) admit(ctx *fasthttp.RequestCtx, c *governedCall) (anthropic, ok bool) {
	up, path := p.router.resolve(ctx.Path())
	anthropic = up.anthropic || len(ctx.Request.Header.Peek("Anthropic-Version")) > 0
	refuse := func(e apiError) (bool, bool) {
		p.writeCallError(ctx, anthropic, nil, e, &Details{Status: StatusFailed})
		p.finish(up, ctx, "", &Details{Status: StatusFailed})
		return anthropic, false
	}
	v, err := SingleValue(&ctx.Request.Header, HeaderMaxRetries)
	if err != nil {
		return refuse(apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: "Governor: " + HeaderMaxRetries + ": " + err.Error(), Final: true})
	}
	maxRetries, err := maxRetriesOf(v, p.cfg.MaxRetries)
	if err != nil {
		return refuse(apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: "Governor: " + err.Error(), Final: true})
	}
	v, err = SingleValue(&ctx.Request.Header, HeaderTenant)
	if err != nil {
		return refuse(apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: "Governor: " + HeaderTenant + ": " + err.Error(), Final: true})
	}
	tenant, err := tenantOf(v)
	if err != nil {
		return refuse(apiError{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: "Governor: " + err.Error(), Final: true})
	}
	l, lerr := p.laneOf(up, &ctx.Request)
	if lerr != nil {
		return refuse(*lerr)
	}
	c.p, c.l = p, l
	c.req = upstreamRequest{in: &ctx.Request, up: up, path: path}
	c.o = callOptions{
		// A malformed Priority is ignored, as RFC 9218 asks: it is a
		// standard header that other software sets too.
		urgency:        priorityOf(&ctx.Request.Header),
		maxRetries:     maxRetries,
		attemptTimeout: p.cfg.AttemptTimeout,
		tenant:         tenant,
		maxResponse:    int64(p.cfg.MaxResponseBytes),
		answers:        &p.answers,
		client:         ctx.Conn(),
	}
	return anthropic, true
}

// answer writes the outcome of c to the client.
//
//go:noinline
func (p *Proxy) answer(ctx *fasthttp.RequestCtx, c *governedCall, anthropic bool) {
	up, res := c.req.up, &c.res
	if res.err != nil {
		// An earlier answer on this keep-alive connection may have left
		// its write deadline.
		_ = ctx.Conn().SetWriteDeadline(time.Time{})
		p.writeCallError(ctx, anthropic, c.l, *res.err, &res.details)
		p.finish(up, ctx, c.l.ID(), &res.details)
		return
	}
	p.respond(ctx, up, c.l, *res)
}

// finish accounts for a call whose answer is complete (not streaming):
// its metrics, and its access log line. laneID is empty for a call refused
// before it had a lane.
func (p *Proxy) finish(up *upstream, ctx *fasthttp.RequestCtx, laneID string, d *Details) {
	up.metrics.countRequest(ctx.Response.StatusCode())
	up.metrics.countCall(d.Status)
	p.metrics.inFlight.Add(-1)
	if p.cfg.AccessLog != nil {
		n := int64(ctx.Response.Header.ContentLength()) // a heldBody's: Body() would read the stream
		if ctx.Response.BodyStream() == nil {
			n = int64(len(ctx.Response.Body()))
		}
		p.logAccess(newAccessRecord(ctx, laneID, d), n)
	}
}

// upstreamRequest is the request a call sends upstream, built from the
// client's on first use: a call that waits in the queue holds only the
// client's request, not a copy of it too.
type upstreamRequest struct {
	in   *fasthttp.Request // the client's request
	up   *upstream
	path []byte // the path for the upstream, decoded (see router.resolve)
	out  *fasthttp.Request
}

// get returns the request to send, building it the first time.
func (r *upstreamRequest) get() *fasthttp.Request {
	if r.out == nil {
		r.out = fasthttp.AcquireRequest()
		buildUpstreamRequest(r.in, r.up, r.path, r.out)
	}
	return r.out
}

// release releases the request built by get, if any.
func (r *upstreamRequest) release() {
	if r.out != nil {
		fasthttp.ReleaseRequest(r.out)
		r.out = nil
	}
}

// buildUpstreamRequest fills out with the request to send upstream: the
// client's method, path (route prefix stripped, upstream base path
// prepended), query, headers and body, without hop-by-hop headers, without
// Governor's own headers, and with the upstream's Host.
func buildUpstreamRequest(in *fasthttp.Request, up *upstream, path []byte, out *fasthttp.Request) {
	in.Header.CopyTo(&out.Header)
	// Governor speaks HTTP/1.1 to its upstreams whatever version the
	// client spoke (RFC 9110 §6.2: an intermediary sends its own
	// version). Forwarded as HTTP/1.0, a call would get an answer the
	// upstream closes its connection after, a stream framed by that
	// close alone.
	out.Header.SetProtocol("HTTP/1.1")
	// A request without a Content-Type goes without one, not with
	// fasthttp's application/octet-stream, which servers that read a
	// JSON body only when it has no type or a JSON one (FastAPI, behind
	// vLLM) would refuse.
	out.Header.SetNoDefaultContentType(true)
	// A request as fasthttp read it has the headers of its raw block (a
	// chunked body's trailers aside, and the block of such a request names
	// Transfer-Encoding), and an implicit Connection: close when it is
	// HTTP/1.0: when neither names a header to remove, there is nothing
	// to remove, and one pass over the block is cheaper than a lookup per
	// name. A request built in code has no raw block.
	if raw := in.Header.RawHeaders(); len(raw) == 0 || in.Header.ConnectionClose() || rawHeaderNamed(raw, upstreamStripped) {
		stripHopHeaders(&out.Header)
		for _, name := range upstreamStripped[len(hopHeaders):] {
			out.Header.Del(name)
		}
	}
	out.Header.SetHost(up.host)
	if asksForStream(in.Body()) {
		// Governor reads a stream's events as they pass (usage, an
		// overload that ends it, a cut) and leaves its bytes as they
		// are: compressed, they could not be read. Identity is always
		// acceptable to the client (RFC 9110 §12.5.3), and a stream of
		// small events gains little from compression.
		out.Header.Set(fasthttp.HeaderAcceptEncoding, "identity")
	}

	uri := out.URI()
	uri.SetScheme(up.scheme)
	uri.SetHost(up.host)
	// path is decoded; the upstream client sends the path as it is given
	// (DisablePathNormalizing), so escape it again. Sent decoded, an
	// escaped "?", "#", space or CR LF would become syntax of the request
	// line, and "%252e%252e" would reach the upstream as "%2e%2e", which it
	// decodes to a ".." that climbs out of the route's base path.
	var buf [256]byte
	full := appendEscapedPath(append(buf[:0], up.basePath...), path)
	uri.SetPathBytes(full)
	uri.SetQueryStringBytes(in.URI().QueryString())
	out.SetBody(in.Body())
}

// asksForStream reports whether a JSON request body asks for a streamed
// answer: it holds a key "stream" whose value is true, as OpenAI's and
// Anthropic's APIs take it. The key is matched at any depth; a body that
// merely mentions it (in a prompt, its quotes are escaped) does not match.
func asksForStream(body []byte) bool {
	key := []byte(`"stream"`)
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			return false
		}
		body = bytes.TrimLeft(body[i+len(key):], " \t\r\n")
		if v, ok := bytes.CutPrefix(body, []byte{':'}); ok && bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("true")) {
			return true
		}
	}
}

// upstreamStripped are the request headers never sent upstream: the
// hop-by-hop ones, then Governor's own and Expect (the body is already
// buffered, so an interim 100 Continue from the upstream would only cost a
// round trip).
var upstreamStripped = append(append([]string(nil), hopHeaders...), fasthttp.HeaderExpect, HeaderMaxRetries, HeaderTenant, HeaderToken)

// appendEscapedPath appends path to dst with every byte that is not a
// path character of RFC 3986 (unreserved, sub-delims, ':', '@', '/')
// percent-encoded.
func appendEscapedPath(dst, path []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range path {
		if pathChar[c] {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return dst
}

// pathChar marks the bytes that appendEscapedPath leaves as they are.
var pathChar = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("-._~!$&'()*+,;=:@/", byte(c)) >= 0
	}
	return t
}()

// respond copies an upstream answer to the client. It takes ownership of
// res.resp and res.lane's slot: a buffered answer is copied and released here;
// a streamed one is handed to fasthttp, which closes it after writing it,
// and closing it releases the response and the lane's slot.
func (p *Proxy) respond(ctx *fasthttp.RequestCtx, up *upstream, l *lane.Lane, res callResult) {
	resp := res.resp
	stripResponseHopHeaders(&resp.Header)
	resp.Header.CopyTo(&ctx.Response.Header)
	// CopyTo also copies the upstream response's default, a made-up
	// Content-Type: an answer without one passes on without one.
	ctx.Response.Header.SetNoDefaultContentType(true)
	stripNoContentFraming(&ctx.Response.Header)
	setDetailHeaders(&ctx.Response.Header, &res.details)

	if resp.BodyStream() == nil { // buffered in the round trip
		// fasthttp writes it after we return: bound that write too.
		boundWrite(ctx.Conn(), time.Now(), p.cfg.StreamIdleTimeout)
		if res.held > 0 {
			// Written from the answer's buffer, whose bytes go back to
			// the budget once they are written.
			h := heldBodies.Get().(*heldBody)
			h.resp, h.budget, h.n = resp, &p.answers, res.held
			h.r.Reset(resp.Body())
			ctx.Response.SetBodyStream(h, len(resp.Body()))
		} else {
			// The client's response takes the answer's buffer (no
			// copy), and the answer takes back the empty one it had,
			// for the pool.
			resp.SwapBody(ctx.Response.SwapBody(resp.SwapBody(nil)))
			fasthttp.ReleaseResponse(resp)
		}
		res.release()
		p.finish(up, ctx, l.ID(), &res.details)
		return
	}

	if isStream(resp.Header.ContentType()) {
		// Send the headers before the first event, which may be minutes
		// away (Ollama loading a model before its first NDJSON line).
		ctx.Response.ImmediateHeaderFlush = true
	}
	up.metrics.countRequest(resp.StatusCode())
	up.metrics.countCall(res.details.Status)
	ln, at, tenant, cost, held := res.lane, res.attempt, res.tenant, res.usage, res.held // the closure captures these, not res, which stays on the stack
	granted, sent := res.granted, res.sent
	var rec *accessRecord
	if p.cfg.AccessLog != nil {
		rec = newAccessRecord(ctx, l.ID(), &res.details)
	}
	var stream io.Reader = resp.BodyStream()
	if len(res.partial) > 0 {
		stream = io.MultiReader(bytes.NewReader(res.partial), stream)
	}
	body := &streamBody{
		resp:       resp,
		stream:     stream,
		conn:       connOf(resp),
		idle:       p.cfg.StreamIdleTimeout,
		client:     ctx.Conn(),
		checkEvery: clientCheckInterval,
		// A successful event stream, or an answer too large for the
		// answers' budget passed on as it arrives: its usage is read as
		// it passes.
		countTokens: streamCountsTokens(resp) || res.spilled && identityEncoded(resp),
	}
	// A successful event stream, readable as it passes: the provider may
	// still end it with an overload error.
	body.watchOverload = streamCountsTokens(resp)
	// A JSON success framed by the close alone, read whole, is checked for
	// a cut (see cutAtClose); passed on as it arrives, it is checked as it
	// passes.
	if res.spilled && resp.Header.ContentLength() == -2 && identityEncoded(resp) &&
		mediaTypeIs(resp.Header.ContentType(), "application/json") {
		body.json = new(jsonEnd)
	}
	// An NDJSON success is followed to its last line: the close may
	// have cut it.
	if ndjsonSuccess(resp) && resp.Header.ContentLength() == -2 {
		body.ndjson = new(ndjsonEnd)
	}
	body.done = func() {
		if ln != nil {
			// The attempt's one outcome (see streamBody.outcome), as
			// for an answer read whole: how the answer ended, from its
			// hand-over to its end.
			now := p.cfg.Now()
			if oc := body.outcome(); oc == lane.RateLimited {
				ln.ObserveRefusal(lane.RefusedOverloaded, now.Sub(sent), granted, now)
			} else {
				ln.Observe(oc, now.Sub(sent), granted, now)
			}
			ln.Done(at)
			ln.Queue().ReleaseTenant(tenant)
		}
		if t, ok := body.tokens.Tokens(); ok {
			l.CountTokens(t)
			cost.observe(l, t, p.cfg.Now())
		}
		p.metrics.inFlight.Add(-1)
		p.answers.give(held)
		if rec != nil {
			rec.streamEnd = body.end()
			p.logAccess(rec, body.written)
		}
	}
	// The headers are written under these deadlines too; and the attempt's
	// deadline on the upstream connection gives way to the stream's limit
	// on silence. (If this fails, the first read fails.)
	_ = body.moveDeadlines(time.Now())
	size := resp.Header.ContentLength()
	if size < 0 {
		if !ctx.Request.Header.IsHTTP11() && !ctx.IsHead() {
			writeUntilClose(ctx, body)
			return
		}
		size = -1 // chunked: -2 (read until close) is not a size we can send
	}
	ctx.Response.SetBodyStream(body, size)
}

// writeUntilClose writes the answer of ctx, whose body is of unknown
// length, to a client that spoke HTTP/1.0, closes body if it is an
// io.Closer, and closes the connection: the close ends the body. HTTP/1.0
// has no chunked coding (RFC 9112 §6.1 has it sent only to HTTP/1.1
// clients), and fasthttp's server frames every body stream of unknown
// length with it, so the answer is written here, within the handler (a
// drain waits for it as for any other), and fasthttp is told to write
// nothing and close the connection. The answers before it on the
// connection are already out: with ReduceMemoryUsage fasthttp flushes
// each one as it is written.
func writeUntilClose(ctx *fasthttp.RequestCtx, body io.Reader) {
	h := &ctx.Response.Header
	h.Del(fasthttp.HeaderTransferEncoding)
	h.SetContentLength(-2) // no Content-Length, and Connection: close
	conn := ctx.Conn()
	if _, err := conn.Write(h.Header()); err == nil {
		// A streamBody's end, a cut included, is its own to tell.
		_, _ = io.Copy(conn, body)
	}
	if c, ok := body.(io.Closer); ok {
		_ = c.Close()
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {}) // fasthttp then closes the connection
}

// clientCheckInterval is how often a call checks that its client is still
// connected.
const clientCheckInterval = 250 * time.Millisecond

// isEventStream reports whether a Content-Type is text/event-stream,
// parameters aside. (mime.ParseMediaType would do, but it allocates a map
// for the parameters on every answer.)
func isEventStream(contentType []byte) bool {
	return mediaTypeIs(contentType, "text/event-stream")
}

// isStream reports whether an answer of this Content-Type is passed on as
// it arrives rather than read whole: an event stream (SSE), or an NDJSON
// stream (Ollama's native API streams its answers as application/x-ndjson).
func isStream(contentType []byte) bool {
	return isEventStream(contentType) || mediaTypeIs(contentType, "application/x-ndjson")
}

func mediaTypeIs(contentType []byte, mt string) bool {
	t, _, _ := bytes.Cut(contentType, []byte{';'})
	return bytes.EqualFold(bytes.TrimSpace(t), []byte(mt))
}

// upstreamError turns a failed attempt into Governor's error.
func upstreamError(up *upstream, err error) apiError {
	var netErr net.Error
	if errors.Is(err, errNoConn) {
		return apiError{Status: fasthttp.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Final: true,
			Message: fmt.Sprintf("upstream %s (%s): no connection to it came free or opened in time (within the attempt timeout, and the connect timeout); the provider never saw the call", up.name, up.url.Redacted())}
	}
	if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &netErr) && netErr.Timeout() {
		return apiError{Status: fasthttp.StatusGatewayTimeout, Code: CodeUpstreamTimeout, Final: true,
			Message: fmt.Sprintf("upstream %s (%s) did not answer in time: %v", up.name, up.url.Redacted(), err)}
	}
	if errors.Is(err, errResponseTooLarge) {
		return apiError{Status: fasthttp.StatusBadGateway, Code: CodeUpstreamBadResponse, Final: true,
			Message: fmt.Sprintf("upstream %s (%s): %v", up.name, up.url.Redacted(), err)}
	}
	return apiError{Status: fasthttp.StatusBadGateway, Code: CodeUpstreamUnreachable, Final: true,
		Message: fmt.Sprintf("upstream %s (%s) unreachable: %v", up.name, up.url.Redacted(), err)}
}

// writeError answers ctx with e, an error of Governor's own (in
// Anthropic's shape if anthropic), and counts it.
func (p *Proxy) writeError(ctx *fasthttp.RequestCtx, anthropic bool, e apiError) {
	p.countError(e.Code)
	reply.WriteError(ctx, anthropic, e)
}

// writeCallError answers a forwarded call of lane l (nil: refused before
// it had one) with Governor's own error e and the call's details d, and
// counts it. x-should-retry: false goes only with a final error: one with
// a Retry-After (queue full, draining, too many lanes) asks the client to
// come back, which the official SDKs do after it.
func (p *Proxy) writeCallError(ctx *fasthttp.RequestCtx, anthropic bool, l *lane.Lane, e apiError, d *Details) {
	if l == nil {
		p.writeError(ctx, anthropic, e)
	} else {
		p.countCallError(l, e.Code)
		reply.WriteError(ctx, anthropic, e)
	}
	setDetailHeaders(&ctx.Response.Header, d)
	if !e.Final {
		ctx.Response.Header.Del(HeaderShouldRetry)
	}
}
