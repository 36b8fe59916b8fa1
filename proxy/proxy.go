package proxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/lane"
)

// Proxy is Governor's main listener: it forwards every call whose path is
// not under /governor/ to its upstream and serves Governor's own API under
// /governor/.
type Proxy struct {
	cfg   Config
	lanes *lane.Registry
	// ctx ends when the Proxy stops for good; calls in the queue see it.
	ctx     context.Context
	cancel  context.CancelFunc
	router  router
	metrics *proxyMetrics
	// refusals logs the calls Governor turns away for want of room.
	refusals *refusalLog
	server   *fasthttp.Server

	budget  bodyBudget // request bodies held (MaxBufferedBytes)
	answers bodyBudget // successful answers read whole, held until written (MaxBufferedBytes)
	conns   *connTracker
	clients *clientWatch // the clients of calls under way
	calls   callCount    // calls of Do in progress

	// serving guards closed and listeners: Shutdown must stop every Serve,
	// including one whose goroutine had not yet reached fasthttp.
	serving   sync.Mutex
	closed    bool
	listeners []*servedListener

	apiExact  map[string]fasthttp.RequestHandler
	apiPrefix []apiRoutePrefix
	// public are the API paths served without the API token.
	public map[string]fasthttp.RequestHandler
}

type apiRoutePrefix struct {
	prefix string
	h      fasthttp.RequestHandler
}

// APIPrefix is the path prefix of Governor's own API on the main listener.
const APIPrefix = "/governor/"

// New returns a Proxy for cfg. It registers its metrics on cfg.Metrics.
func New(cfg Config) (*Proxy, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:      c,
		apiExact: map[string]fasthttp.RequestHandler{},
		public:   map[string]fasthttp.RequestHandler{},
		conns:    newConnTracker(),
		clients:  newClientWatch(clientCheckInterval, c.Now),
		router: router{
			def:    newUpstream("default", c.Upstream, &c),
			byName: map[string]*upstream{},
		},
	}
	names := []string{"default"}
	for _, r := range c.Routes {
		if r.Name == "default" {
			return nil, errors.New(`proxy: route name "default" is taken by the default upstream`)
		}
		p.router.byName[r.Name] = newUpstream(r.Name, r.URL, &c)
		names = append(names, r.Name)
	}
	p.budget.max = c.MaxBufferedBytes
	p.answers.max = c.MaxBufferedBytes
	c.Metrics.NewGauge("governor_client_connections", func() float64 { return float64(p.conns.count()) })
	c.Metrics.NewGauge("governor_client_connections_max", func() float64 { return float64(c.MaxConnections) })
	c.Metrics.NewGauge("governor_buffered_request_bytes", func() float64 { return float64(p.budget.held.Load()) })
	c.Metrics.NewGauge("governor_buffered_answer_bytes", func() float64 { return float64(p.answers.held.Load()) })
	p.metrics = newProxyMetrics(c.Metrics, names)
	p.refusals = newRefusalLog(c.Logger, c.Now)
	for _, up := range p.upstreams() {
		up.metrics = p.metrics.routes[up.name]
	}
	p.lanes, err = lane.New(lane.Config{AIMD: c.AIMD, QueueCapacity: c.QueueCapacity, MaxLanes: c.MaxLanes, MaxTenants: c.MaxTenants,
		MaxConnsPerUpstream: c.MaxConnsPerUpstream, MaxPause: c.MaxPause, MaxBackoff: c.BackoffMax, Coordinator: c.Coordinator, SyncInterval: c.SyncInterval,
		Now: c.Now, Metrics: c.Metrics, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	for _, up := range p.upstreams() {
		up.connecting = func() func(bool) { return p.lanes.Connecting(up.name) }
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.HandleAPI(APIPrefix+"lanes", p.serveLanes)
	p.server = &fasthttp.Server{
		Handler:                      p.Handler,
		ErrorHandler:                 p.serverError,
		HeaderReceived:               p.headerReceived,
		MaxRequestBodySize:           c.MaxBodyBytes,
		ReadTimeout:                  c.ReadTimeout,
		IdleTimeout:                  c.ClientIdleTimeout,
		ReadBufferSize:               requestHeadBufferSize,
		NoDefaultServerHeader:        true, // the upstream's Server header passes through
		NoDefaultDate:                true, // so does its Date
		NoDefaultContentType:         true, // and the absence of a Content-Type
		DisablePreParseMultipartForm: true, // bodies are forwarded, never parsed as forms
		CloseOnShutdown:              true,
		// A call waiting in a lane's queue holds its connection. Without
		// this, it also holds the connection's 16 KiB read buffer, which
		// fasthttp otherwise keeps for the connection's life: 22 KiB of
		// heap per waiting call instead of 7.
		ReduceMemoryUsage: true,
		// Beyond MaxConnections, the listener answers a new connection
		// 503 too_many_connections and closes it (see drainListener);
		// fasthttp's own 503 is the bound of other listeners.
		Concurrency: c.MaxConnections,
		Logger:      fasthttpLogger{c.Logger},
		ConnState:   p.conns.state,
	}
	return p, nil
}

// HandleAPI registers h for a path under APIPrefix. A path ending in "/"
// matches every path it prefixes; other paths match exactly. HandleAPI must
// be called before Serve.
func (p *Proxy) HandleAPI(path string, h fasthttp.RequestHandler) {
	if !strings.HasPrefix(path, APIPrefix) {
		panic(fmt.Sprintf("proxy: API path %q is not under %s", path, APIPrefix))
	}
	if strings.HasSuffix(path, "/") {
		p.apiPrefix = append(p.apiPrefix, apiRoutePrefix{path, h})
		return
	}
	p.apiExact[path] = h
}

// HandlePublic registers h for exactly path, under APIPrefix, like
// HandleAPI but served without the X-Governor-Token header that
// Config.APIToken requires elsewhere: a browser cannot send a header when
// it opens a page. h must serve only what needs no guarding, such as a
// page's static files whose scripts call the API with the token. The
// match is exact even for a path ending in "/" (it prefixes nothing).
// HandlePublic must be called before Serve.
func (p *Proxy) HandlePublic(path string, h fasthttp.RequestHandler) {
	if !strings.HasPrefix(path, APIPrefix) || path == APIPrefix {
		panic(fmt.Sprintf("proxy: public path %q is not a path under %s", path, APIPrefix))
	}
	p.public[path] = h
}

// Serve accepts connections on ln until Shutdown, then returns nil. Called
// after Shutdown, it closes ln and returns nil at once.
func (p *Proxy) Serve(ln net.Listener) error {
	refusal := reply.Raw(apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeTooManyConnections, RetryAfter: 1,
		Message: fmt.Sprintf("Governor holds the most client connections it may (%d); retry later", p.cfg.MaxConnections)})
	sl := newServedListener(listenerFor(ln, p.fdShortage, p.cfg.MaxConnections, refusal, p.metrics.refusedConns.Inc))
	p.serving.Lock()
	if p.closed {
		p.serving.Unlock()
		_ = ln.Close()
		return nil
	}
	p.listeners = append(p.listeners, sl)
	p.serving.Unlock()
	return p.server.Serve(sl)
}

// fdShortage logs the start of a shortage of file descriptors, during
// which the listener pauses between accepts.
func (p *Proxy) fdShortage(err error) {
	p.cfg.Logger.Warn("out of file descriptors: new connections wait until some close "+
		"(raise the open-file limit, or lower GOVERNOR_MAX_CONNECTIONS)", "err", err)
}

// awaitListeners marks the Proxy closed to new Serve calls and waits until
// fasthttp accepts on every listener already given to Serve, or ctx ends.
//
// fasthttp's shutdown closes only the listeners its Serve has registered,
// and returns at once when there are none. Without this wait, a Shutdown
// that comes right after "go p.Serve(ln)" (a SIGTERM during startup, a
// test that never connects) would return while that Serve goes on
// accepting for ever.
func (p *Proxy) awaitListeners(ctx context.Context) {
	p.serving.Lock()
	p.closed = true
	ls := p.listeners
	p.serving.Unlock()
	for _, l := range ls {
		select {
		case <-l.accepting:
		case <-ctx.Done():
			return
		}
	}
}

// Shutdown stops accepting connections, closes idle ones and waits for the
// calls in progress, queued ones and calls of Do included, to end or ctx
// to be done. When ctx ends first, the calls still waiting get Governor's
// "draining" error instead of a dropped connection, and those in flight
// upstream are cut with the same error.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.awaitListeners(ctx)
	done := make(chan error, 1)
	go func() { done <- p.server.ShutdownWithContext(context.WithoutCancel(ctx)) }()
	tick := time.NewTicker(acceptGrace)
	defer tick.Stop()
	lastReport := p.cfg.Now()
	var serverErr error
	var idle <-chan struct{} // once the server is done: the calls of Do
wait:
	for {
		// Connections accepted during the listener's grace, and ones
		// that never sent a request, must not hold the drain.
		p.conns.nudgeSilent(silentConnGrace)
		select {
		case serverErr = <-done:
			done = nil
			idle = p.calls.idle()
			continue
		case <-idle:
			p.stop()
			return serverErr
		case <-ctx.Done():
			break wait
		case <-tick.C:
		}
		if now := p.cfg.Now(); now.Sub(lastReport) >= drainReportEvery {
			lastReport = now
			p.cfg.Logger.Info("drain in progress", "calls_in_progress", p.metrics.inFlight.Load(), "queued", p.lanes.Queued())
		}
	}
	// Out of time: answer whatever still waits with Governor's draining
	// error, cut the calls still in flight upstream (they get the same
	// error), then let the handlers write those answers, for answerGrace
	// at most: a client that does not read its answer would otherwise
	// hold the drain until its write deadline (StreamIdleTimeout).
	p.stop()
	for _, up := range p.upstreams() {
		up.cutConnections()
	}
	if done != nil {
		grace := time.NewTimer(answerGrace)
		defer grace.Stop()
		select {
		case <-done:
		case <-grace.C:
			p.conns.closeAll()
			<-done
		}
	}
	return ctx.Err()
}

// answerGrace is how long a drain that ran out of time lets the handlers
// write their last answers before it closes the client connections still
// open.
const answerGrace = time.Second

// drainReportEvery is how often a drain logs what it still waits for.
const drainReportEvery = time.Second

func (p *Proxy) upstreams() []*upstream {
	ups := []*upstream{p.router.def}
	for _, up := range p.router.byName {
		ups = append(ups, up)
	}
	return ups
}

// stop ends the calls still waiting and closes idle upstream connections
// (so fasthttp's connection cleaners end too).
func (p *Proxy) stop() {
	p.cancel()
	p.lanes.Close()
	p.clients.close()
	for _, up := range p.upstreams() {
		up.client.CloseIdleConnections()
	}
}

// serveLanes answers GET /governor/lanes.
func (p *Proxy) serveLanes(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Message: "use GET"})
		return
	}
	out := struct {
		Lanes []lane.Info `json:"lanes"`
		// Redis, with GOVERNOR_REDIS_URL set, says whether the lanes are
		// shared with the other Governors now (up) or governed here
		// alone until Redis answers again.
		Redis *redisStatus `json:"redis,omitempty"`
	}{Lanes: p.lanes.Info(p.cfg.Now())}
	if on, up := p.lanes.Coordinated(); on {
		out.Redis = &redisStatus{Up: up}
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, out)
}

// redisStatus is the state of Redis coordination, as GET /governor/lanes
// shows it.
type redisStatus struct {
	Up bool `json:"up"`
}

// Handler serves one request on the main listener.
func (p *Proxy) Handler(ctx *fasthttp.RequestCtx) {
	// Deadlines on the connection are dealt with where they matter, not
	// here on every call: a previous answer's write deadline (see
	// streamBody.moveDeadlines and respond) is replaced or cleared before
	// each answer is written, and the read deadline that fasthttp (or a
	// drain, see connTracker) set is cleared when a client watch starts
	// peeking at the socket (see clientWatch).
	p.conns.busy(ctx.Conn())
	reserved := p.budget.claim(&ctx.Request.Header) // by headerReceived
	if !p.acceptable(ctx) {
		p.budget.give(reserved)
		return
	}
	if n := int64(len(ctx.Request.Body())); reserved > 0 || n > 0 {
		if !p.budget.hold(reserved, n) {
			p.refuseBuffersFull(ctx)
			return
		}
		defer p.budget.give(n)
	}
	dropTrailerFields(&ctx.Request.Header)
	if framedTwice(ctx.Request.Header.RawHeaders()) {
		// Framed by both Content-Length and Transfer-Encoding: chunked
		// won, but a party on the way may have framed it the other way,
		// so what follows on this connection is not read as a request
		// (RFC 9112 §6.3). Set once the answer's headers are in place.
		defer ctx.SetConnectionClose()
	}
	path := ctx.Path()
	if bytes.HasPrefix(path, []byte(APIPrefix)) || bytes.Equal(path, []byte("/governor")) {
		// Governor's API writes under no deadline of a previous answer,
		// and may watch its client (a sync batch).
		_ = ctx.Conn().SetWriteDeadline(time.Time{})
		_ = ctx.Conn().SetReadDeadline(time.Time{})
		p.serveAPI(ctx, path)
		if s := ctx.Response.BodyStream(); s != nil && ctx.Response.Header.ContentLength() < 0 &&
			!ctx.Request.Header.IsHTTP11() && !ctx.IsHead() {
			// A batch's progress lines or results, to a client in
			// HTTP/1.0.
			writeUntilClose(ctx, s)
		}
		p.metrics.countRequest(apiRoute, ctx.Response.StatusCode())
		return
	}
	p.forward(ctx)
}

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
	if c, ok := ctx.Conn().(*clientConn); ok && c.head.bareLF {
		// Read whole at once, with a CR LF CR LF after its end (in its
		// body): refused as one that fasthttp waited on is.
		return refuse(fasthttp.StatusBadRequest, CodeBadRequest, bareLFMessage)
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

// requestHeadBufferSize is the read buffer of a client connection, which
// bounds a request's head: a larger one gets 431.
const requestHeadBufferSize = 16 << 10

// HeaderToken carries GOVERNOR_API_TOKEN on calls to Governor's own API.
const HeaderToken = "X-Governor-Token"

func (p *Proxy) serveAPI(ctx *fasthttp.RequestCtx, path []byte) {
	if h, ok := p.public[string(path)]; ok {
		h(ctx)
		return
	}
	if p.cfg.APIToken == "" && reboundHost(ctx) {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusForbidden, Code: CodeHostNotAllowed,
			Message: "Governor's API on a loopback address answers no request for a domain name (DNS rebinding), unless GOVERNOR_API_TOKEN is set: use localhost or an IP address"})
		return
	}
	if crossOriginWrite(&ctx.Request.Header) {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusForbidden, Code: CodeCrossOrigin,
			Message: "Governor's API takes no request that changes something from a web page of another origin"})
		return
	}
	if p.cfg.APIToken != "" &&
		subtle.ConstantTimeCompare(ctx.Request.Header.Peek(HeaderToken), []byte(p.cfg.APIToken)) != 1 {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusUnauthorized, Code: CodeUnauthorized,
			Message: "Governor's API requires the " + HeaderToken + " header"})
		return
	}
	if h, ok := p.apiExact[string(path)]; ok {
		h(ctx)
		return
	}
	for _, r := range p.apiPrefix {
		if bytes.HasPrefix(path, []byte(r.prefix)) {
			r.h(ctx)
			return
		}
	}
	p.writeError(ctx, false, apiError{Status: fasthttp.StatusNotFound, Code: CodeNotFound,
		Message: fmt.Sprintf("no Governor endpoint %s", path)})
}

// crossOriginWrite reports whether h is a browser's request that may
// change something (any method but GET and HEAD) sent by a page of another
// origin than Governor's. A page can have a browser send a POST with a
// form's Content-Type without asking first (no CORS preflight), so without
// this any page a user visited could start batches on a Governor on their
// machine. Clients other than browsers send neither header read here.
//
// Sec-Fetch-Site, which a page cannot set, decides when present: only
// "same-origin" and "none" (the user's own action) pass. Without it (older
// browsers), the Origin must name the host and port the request was sent
// to ("null", a sandboxed page or a file, names none).
func crossOriginWrite(h *fasthttp.RequestHeader) bool {
	if h.IsGet() || h.IsHead() {
		return false
	}
	if site := h.Peek("Sec-Fetch-Site"); len(site) > 0 {
		return !bytes.EqualFold(site, []byte("same-origin")) && !bytes.EqualFold(site, []byte("none"))
	}
	origin := h.Peek("Origin")
	if len(origin) == 0 {
		return false
	}
	u, err := url.Parse(string(origin))
	if err != nil || u.Host == "" {
		return true
	}
	host := string(h.Host())
	if strings.EqualFold(u.Host, host) {
		return false
	}
	// An origin leaves its scheme's default port out; a Host may not.
	port := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	return u.Port() != "" || port == "" || !strings.EqualFold(u.Host+":"+port, host)
}

// reboundHost reports whether ctx came on a loopback connection for a
// domain name: what a browser sends when a page's name was made to resolve
// to 127.0.0.1 (DNS rebinding), so that the page, same-origin in the
// browser's eyes, could read Governor's API (batch results, lanes) and
// write to it. Such a name is a domain the attacker controls, so it has a
// dot; an IP address, localhost, names under .localhost, names without a
// dot (an /etc/hosts alias) and no Host at all (HTTP/1.0) pass, as does
// any host on a connection that did not come over loopback. So do names
// under .internal, a top-level domain kept for private use that no
// attacker can point at 127.0.0.1 from the internet: a container reaches
// its host's loopback by one (Docker Desktop's host.docker.internal,
// Podman's host.containers.internal).
func reboundHost(ctx *fasthttp.RequestCtx) bool {
	if ip := ctx.LocalIP(); ip == nil || !ip.IsLoopback() {
		return false
	}
	host := string(ctx.Request.Header.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return strings.Contains(host, ".") && net.ParseIP(host) == nil &&
		!strings.HasSuffix(host, ".localhost") && !strings.HasSuffix(host, ".internal")
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

// fasthttpLogger sends fasthttp's own messages (mostly connection errors of
// clients) to the debug level: they are noise at info.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}
