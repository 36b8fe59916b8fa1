package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
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
	// tooManyLanes refuses a call that would need a lane beyond MaxLanes.
	tooManyLanes *apiError
	server       *fasthttp.Server

	budget  bodyBudget // request bodies held (MaxBufferedBytes)
	answers bodyBudget // successful answers read whole, held until written (MaxBufferedBytes)
	conns   *connTracker
	clients *clientWatch // the clients of calls under way
	calls   callCount    // calls of Do in progress
	// refusing is set by RefuseCalls: calls to forward get draining.
	refusing atomic.Bool

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
	p.refusals = newRefusalLog(c.Logger, c.Now, c.Names)
	p.tooManyLanes = tooManyLanes(c.Names.MaxLanes)
	for _, up := range p.upstreams() {
		up.metrics = p.metrics.routes[up.name]
	}
	p.lanes, err = lane.New(lane.Config{AIMD: c.AIMD, QueueCapacity: c.QueueCapacity, MaxLanes: c.MaxLanes, MaxTenants: c.MaxTenants,
		MaxConnsPerUpstream: c.MaxConnsPerUpstream, MaxPause: c.MaxPause, MaxBackoff: c.BackoffMax, Coordinator: c.Coordinator, SyncInterval: c.SyncInterval, LeaseTTL: c.LeaseTTL,
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
		Handler:                      p.handle,
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
		"(raise the open-file limit, or lower "+p.cfg.Names.MaxConnections+")", "err", err)
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

// handle serves one request on the main listener.
func (p *Proxy) handle(ctx *fasthttp.RequestCtx) {
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
	if p.refusing.Load() {
		p.writeError(ctx, p.anthropicShaped(ctx), apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeDraining, RetryAfter: 1,
			Message: "Governor is shutting down and takes no new calls; retry in a moment"})
		return
	}
	p.forward(ctx)
}

// RefuseCalls makes the Proxy answer every call to forward that comes from
// now on with Governor's draining error (503, Retry-After: 1), while it
// goes on accepting connections, serving Governor's API and the calls
// already under way: the start of a drain that keeps the listener open
// for what clients have left to read there. Shutdown closes the listener.
func (p *Proxy) RefuseCalls() { p.refusing.Store(true) }

// requestHeadBufferSize is the read buffer of a client connection, which
// bounds a request's head: a larger one gets 431.
const requestHeadBufferSize = 16 << 10

// fasthttpLogger sends fasthttp's own messages (mostly connection errors of
// clients) to the debug level: they are noise at info.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug(fmt.Sprintf(format, args...), "component", "fasthttp")
}
