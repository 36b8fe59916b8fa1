package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// Call is a governed call made by Governor itself rather than forwarded
// from a client connection: a batch item. It travels exactly the path of a
// proxied call (route, lane, queue, controller, retries), so batch items and
// interactive calls share one governance.
type Call struct {
	// Method is the HTTP method; empty means POST.
	Method string
	// Path is a path as a client would send it to Governor, query
	// included: "/v1/chat/completions", "/anthropic/v1/messages".
	// Prefix routes apply. It must be relative (see ValidatePath).
	Path string
	// Header holds the request headers (credentials, content type, …).
	// Accept-Encoding is always sent as identity: the answer's Body is
	// returned decoded (gzip and deflate) or not at all.
	Header map[string]string
	// Body is the request body.
	Body []byte
	// Urgency is the RFC 9218 urgency, 0 (most urgent) … 7.
	Urgency int
	// MaxRetries is the retry budget; negative means the proxy's default.
	MaxRetries int
	// AttemptTimeout bounds each attempt; zero means the proxy's default.
	AttemptTimeout time.Duration
	// Tenant is whose share of the lane the call takes (see
	// HeaderTenant); empty means DefaultTenant. A name that
	// ValidateTenant refuses runs nothing.
	Tenant string
	// MaxResponseBytes bounds the answer, which is read whole; a larger
	// one fails the call (Err: 502 upstream_bad_response, saying so).
	// Zero means the proxy's MaxResponseBytes.
	MaxResponseBytes int
	// Requeue says the caller asks again when a full queue, or the
	// bound on lanes, turns the call away before any attempt (a batch
	// item waiting for room): that queue_full or too_many_lanes is then
	// not counted in governor_errors_total nor logged as a refusal,
	// since nobody is answered with it.
	Requeue bool
	// OnAttempt, if set, is called with n (1 for the first attempt) each
	// time an attempt is about to be sent upstream, from the goroutine of
	// Do. It must return quickly: the attempt holds its lane's slot.
	OnAttempt func(n int)
}

// Result is the answer to a Call. Exactly one of Err or StatusCode is set.
type Result struct {
	StatusCode  int
	ContentType string
	// RequestID is the provider's id for the answer (x-request-id, or
	// Anthropic's request-id), empty when it sent none.
	RequestID string
	// Location is the answer's Location header as the provider sent it
	// (a redirect's target), empty when it sent none.
	Location string
	// Lane is the id of the lane the call went through, as
	// GET /governor/lanes shows it; empty when it got none.
	Lane string
	// Body is the whole answer. A streamed answer is read to its end
	// inside its attempt: one that the provider cut, or ended with an
	// error event (an overload), is a failed attempt and is retried.
	Body []byte
	// Err is an error of Governor's own: no upstream answer to return.
	Err     *Error
	Details Details
}

// Error is an error of Governor's own, as a Result carries it.
type Error struct {
	Status  int    // the HTTP status Governor would answer with
	Code    string // e.g. "queue_full", "upstream_unreachable"
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrBadPath reports a Call path that Governor will not send anywhere.
var ErrBadPath = errors.New("bad path")

// ValidatePath checks that a Call path is a relative path that Governor
// routes to a configured upstream: absolute URLs ("https://…", "//host/…")
// are refused, so a Call can never reach an arbitrary host.
func (p *Proxy) ValidatePath(path string) error {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return fmt.Errorf("%w %q: want a path such as /v1/chat/completions, not a URL", ErrBadPath, path)
	}
	if strings.ContainsRune(path, ' ') {
		// url.ParseRequestURI accepts a space in the query, which would
		// end the request target of the line sent upstream.
		return fmt.Errorf("%w %q: escape spaces as %%20", ErrBadPath, path)
	}
	u, err := url.ParseRequestURI(path)
	if err != nil || u.Host != "" || u.Scheme != "" {
		return fmt.Errorf("%w %q: not a valid request path", ErrBadPath, path)
	}
	if strings.HasPrefix(u.Path, APIPrefix) || u.Path == "/governor" {
		return fmt.Errorf("%w %q: Governor's own API cannot be called through itself", ErrBadPath, path)
	}
	return nil
}

// Do runs c under governance and returns its answer, read whole. It
// returns when the call is done or ctx ends. ctx ending is to the call what
// a client disconnecting is to a proxied call: a call that waits leaves the
// queue and nothing more is sent for it; an attempt in flight is cut at
// once, its upstream connection closed and the lane's slot given back, as
// is the reading of the answer's body. The call is then FAILED, with the
// provider's answer to an earlier attempt if there is one, else Governor's
// error client_closed (499; draining once the proxy has stopped for good);
// it is not retried, and the controller does not count the cut.
func (p *Proxy) Do(ctx context.Context, c *Call) Result {
	p.calls.add()
	defer p.calls.done()
	if err := p.ValidatePath(c.Path); err != nil {
		return Result{Err: &Error{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: err.Error()},
			Details: Details{Status: StatusDidNotRun}}
	}
	in := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(in)
	in.SetRequestURI(c.Path)
	in.Header.SetMethod(c.Method)
	if c.Method == "" {
		in.Header.SetMethod(fasthttp.MethodPost)
	}
	for k, v := range c.Header {
		in.Header.Set(k, v)
	}
	// The answer goes to the caller as bytes, without the header that
	// would say how they are encoded: ask for them as they are, whatever
	// the call's own header says (see decodeAnswer for an upstream that
	// encodes them all the same).
	in.Header.Set(fasthttp.HeaderAcceptEncoding, "identity")
	in.SetBody(c.Body)

	// Route on the normalized path, as for a proxied call.
	up, path := p.router.resolve(in.URI().Path())

	opts := callOptions{urgency: min(max(c.Urgency, 0), 7), maxRetries: c.MaxRetries, attemptTimeout: c.AttemptTimeout, tenant: c.Tenant,
		maxResponse: int64(c.MaxResponseBytes), wholeStreams: true, onAttempt: c.OnAttempt}
	if opts.maxResponse <= 0 {
		opts.maxResponse = int64(p.cfg.MaxResponseBytes)
	}
	if opts.tenant == "" {
		opts.tenant = DefaultTenant
	} else if err := ValidateTenant(opts.tenant); err != nil {
		return Result{Err: &Error{Status: fasthttp.StatusBadRequest, Code: CodeBadRequest, Message: "tenant: " + err.Error()},
			Details: Details{Status: StatusDidNotRun}}
	}
	if opts.maxRetries < 0 {
		opts.maxRetries = p.cfg.MaxRetries
	}
	opts.maxRetries = min(opts.maxRetries, MaxRetriesCeiling)
	if opts.attemptTimeout <= 0 {
		opts.attemptTimeout = p.cfg.AttemptTimeout
	}
	l, lerr := p.laneOf(up, in)
	if lerr != nil {
		if !c.Requeue {
			p.countError(lerr.Code)
		}
		return Result{Err: &Error{Status: lerr.Status, Code: lerr.Code, Message: lerr.Message},
			Details: Details{Status: StatusDidNotRun}}
	}
	// The proxy stopping for good ends the call like a client leaving.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	// The call's client is its caller, gone when ctx ends.
	wc := p.clients.follow(ctx, in.Body())
	defer p.clients.unwatch(wc)
	g := governedCall{p: p, l: l, req: upstreamRequest{in: in, up: up, path: path}, o: opts, watched: wc}
	g.run(ctx)
	res := &g.res
	if res.err != nil {
		e := res.err
		if !(c.Requeue && e.Code == CodeQueueFull && res.details.Attempts == 0) {
			p.countCallError(l, e.Code)
		}
		return Result{Err: &Error{Status: e.Status, Code: e.Code, Message: e.Message}, Details: res.details, Lane: l.ID()}
	}
	resp := res.resp
	defer fasthttp.ReleaseResponse(resp)
	defer res.release()
	out := Result{StatusCode: resp.StatusCode(), ContentType: string(resp.Header.ContentType()),
		RequestID: requestID(&resp.Header), Location: string(resp.Header.Peek(fasthttp.HeaderLocation)),
		Lane: l.ID(), Details: res.details}
	// The answer's buffer becomes the result's: the body is not copied.
	out.Body = resp.SwapBody(nil)
	if enc := resp.Header.ContentEncoding(); len(enc) > 0 && !bytes.EqualFold(enc, []byte("identity")) {
		return p.decodeAnswer(out, enc, up, l, int(opts.maxResponse))
	}
	return out
}

// decodeAnswer returns out with its body decoded from enc, the
// Content-Encoding an upstream used though the Call asked for none
// (RFC 9110 lets a server encode an answer to a request that names no
// encoding, and some do whatever the request says): gzip and deflate are
// decoded, up to limit bytes, taking room from the answers' budget while
// they are. An answer Governor cannot decode, or whose decoding fails,
// fails the call, as an answer too large does: its bytes would reach the
// caller as if they were the answer itself.
func (p *Proxy) decodeAnswer(out Result, enc []byte, up *upstream, l *lane.Lane, limit int) Result {
	plain, held, err := decompress(enc, out.Body, limit, &p.answers)
	p.answers.give(held)
	if err == nil {
		out.Body = plain
		return out
	}
	why := fmt.Sprintf("answer encoded as %q, which Governor cannot decode (it asked for identity)", enc)
	switch {
	case errors.Is(err, errResponseTooLarge):
		why = fmt.Sprintf("answer too large: more than %d bytes once decoded from %s", limit, enc)
	case errors.Is(err, errNoRoomToDecompress):
		why = fmt.Sprintf("answer encoded as %s: %v", enc, err)
	case !errors.Is(err, errUnknownEncoding):
		why = fmt.Sprintf("answer encoded as %s does not decode: %v", enc, err)
	}
	p.countCallError(l, CodeUpstreamBadResponse)
	d := out.Details
	d.Status = StatusFailed
	d.Errors = append(d.Errors, why)
	return Result{Err: &Error{Status: fasthttp.StatusBadGateway, Code: CodeUpstreamBadResponse,
		Message: fmt.Sprintf("upstream %s (%s): %s", up.name, up.url.Redacted(), why)}, Details: d, Lane: out.Lane}
}

// ClientContext returns a context for work done on behalf of the client of
// ctx (a sync batch): it ends when that client disconnects or the proxy
// stops for good. Call stop when the work is done.
func (p *Proxy) ClientContext(ctx *fasthttp.RequestCtx) (context.Context, func()) {
	wc := p.clients.watch(ctx.Conn(), nil)
	cctx, _ := wc.context(p.ctx)
	// stop may be called more than once; wc, once unwatched, may serve
	// another call.
	return cctx, sync.OnceFunc(func() { p.clients.unwatch(wc) })
}

// ClientLeft reports whether a context from ClientContext ended because
// the client disconnected.
func ClientLeft(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errClientLeft)
}

// requestID returns the provider's id of an answer.
func requestID(h *fasthttp.ResponseHeader) string {
	if v := h.Peek("X-Request-Id"); len(v) > 0 {
		return string(v)
	}
	return string(h.Peek("Request-Id"))
}
