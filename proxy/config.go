package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/lane"
)

// Config configures a Proxy. The zero value of every field but Upstream and
// Metrics is a documented default.
type Config struct {
	// Upstream is the default upstream: every path that no route claims
	// goes there. Required.
	Upstream *url.URL
	// Routes are named prefix routes (see Route).
	Routes []Route

	// MaxBodyBytes bounds a request body; larger bodies get 413.
	// Default 32 MiB.
	MaxBodyBytes int
	// MaxResponseBytes bounds an upstream answer that Governor reads whole
	// before passing it on: every answer but an event stream or an NDJSON
	// stream, whatever its framing. A larger one fails the call with 502.
	// Default 64 MiB.
	MaxResponseBytes int
	// MaxBufferedBytes bounds the bytes of request bodies held at once by
	// calls waiting or in flight (Governor's API calls, batches, included;
	// and what HoldBodies takes), and by bodies while they are read (their
	// Content-Length, or MaxBodyBytes for a chunked one, or what is left).
	// A call whose body would take the total beyond it gets 503
	// buffers_full with Retry-After, before its body is read. The successful answers of forwarded calls
	// read whole (see MaxResponseBytes) are bounded by as much again, on a
	// budget of their own, until they are written: one that does not fit
	// is passed on as it arrives instead, and never refuses a call.
	// Default 256 MiB.
	MaxBufferedBytes int64
	// AttemptTimeout bounds one attempt from dispatch until its response
	// headers arrive and, for a buffered answer, until its body is read.
	// A stream, passed on or read whole by a Call, has no overall limit:
	// StreamIdleTimeout bounds it. Default 10m.
	AttemptTimeout time.Duration
	// StreamIdleTimeout ends a streamed answer whose upstream sends nothing
	// for this long; for a stream a Call reads whole, nothing but
	// keep-alive events (SSE comment lines, Anthropic's ping) is nothing.
	// A stream passed on to a client has no overall time limit. Default
	// 5m.
	StreamIdleTimeout time.Duration
	// ConnectTimeout bounds dialing an upstream, its TLS handshake
	// included, and waiting for a free connection to it. Default 10s.
	ConnectTimeout time.Duration
	// IdleConnTimeout closes upstream keep-alive connections idle this long.
	// Default 60s.
	IdleConnTimeout time.Duration
	// MaxConnsPerUpstream bounds the connections to one upstream, and so
	// the calls in flight to it over all its lanes: calls beyond it wait
	// for a free connection, ConnectTimeout at most, and their lanes show
	// ConnLimited. Default 1024.
	MaxConnsPerUpstream int
	// ReadTimeout bounds reading one client request, headers and body.
	// Default 60s.
	ReadTimeout time.Duration
	// ClientIdleTimeout closes client keep-alive connections idle this long.
	// Default 120s.
	ClientIdleTimeout time.Duration
	// MaxConnections bounds the client connections open on each listener
	// given to Serve; beyond it a new connection is answered 503
	// too_many_connections (Retry-After: 1) and closed; no request is
	// served from it, but what the client still sends is read and
	// discarded for up to 2s, so that it reads the 503 rather than a
	// reset. Default 262144 (fasthttp's). Whatever the bound, a listener
	// that runs out of file descriptors pauses and accepts again once
	// some are free.
	MaxConnections int

	// MaxRetries is the retry budget of a call: how many failed attempts
	// it retries. A 429 or 529 that came while the lane's other calls
	// were being served costs nothing, for QueueTimeout at most (see the
	// package doc), so a call can make more attempts than this. A call
	// may lower or raise it with X-Governor-Max-Retries (0 to
	// MaxRetriesCeiling; any other value is refused with 400). Zero means
	// the default, 10; negative means no retries.
	MaxRetries int
	// QueueTimeout bounds one wait in a lane's queue; a call still waiting
	// then gets 504. Default 10m.
	QueueTimeout time.Duration
	// QueueCapacity bounds the calls waiting in one lane; beyond it, 503
	// with Retry-After. Default 10000.
	QueueCapacity int
	// MaxPause caps the pause a provider's Retry-After imposes on a lane.
	// Default 60s.
	MaxPause time.Duration
	// BackoffBase and BackoffMax shape the exponential backoff with full
	// jitter used when the provider gives no hint: the n-th retry waits a
	// random time in [0, min(BackoffMax, BackoffBase·2^(n-1))].
	// Defaults 500ms and 30s.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxLanes bounds the lanes (and their metric series); once reached,
	// new models share one lane per upstream and credential, and a new
	// credential evicts a lane whose credential the provider refused
	// (401, 403) or the least recently used lane idle for minutes, or is
	// refused (503 too_many_lanes). Default 256.
	MaxLanes int
	// MaxTenants bounds the tenants (X-Governor-Tenant) whose shares of
	// one lane are kept apart; past it, the calls of further tenants share
	// one. Default 100.
	MaxTenants int
	// AIMD configures every lane's controller. Max defaults to 64.
	AIMD aimd.Config
	// APIToken, if set, is required in the X-Governor-Token header of
	// every call to Governor's own API (/governor/*); without it they get
	// 401 and run nothing. Forwarded calls are unaffected: provider
	// credentials in Authorization pass through untouched.
	APIToken string
	// Coordinator, if set, shares every lane with the other Governors that
	// use it (package coord, over Redis). Nil: each lane is governed here
	// alone.
	Coordinator lane.Coordinator
	// SyncInterval is how often lanes are synced with the Coordinator.
	// Default 50ms.
	SyncInterval time.Duration
	// LeaseTTL is the Coordinator's lease (see lane.Config.LeaseTTL).
	LeaseTTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time

	// TLSConfig, if set, is used for HTTPS upstreams (custom roots in tests).
	TLSConfig *tls.Config
	// Metrics receives Governor's metrics. Required; owned by the caller.
	Metrics *metrics.Set
	// Logger receives operational logs. Default: discard.
	Logger *slog.Logger
	// AccessLog, if set, receives one line per forwarded call, at Info
	// level, once its answer is sent (a stream's, once it has ended):
	// message "call", with method, path (without the query), lane, code
	// (the HTTP status sent), status (Governor's), attempts, queue_ms,
	// upstream_ms (dispatch to answer, over all attempts; to its headers
	// for a stream), duration_ms (from the request's arrival), bytes_in,
	// bytes_out (body bytes sent) and request_id (the provider's
	// x-request-id or request-id, else the request's X-Request-Id). Nil:
	// no access log.
	AccessLog *slog.Logger
	// Names are what Governor's errors and logs call the settings an
	// operator may change when they refuse a call. Empty ones are the
	// fields' own names ("Config.MaxLanes"); a program configured
	// otherwise (environment variables) gives the names its users set.
	Names Names
}

// Names are the names of Config's settings in what Governor writes to
// its clients and its logs; see Config.Names.
type Names struct {
	QueueCapacity, QueueTimeout, MaxBufferedBytes, MaxLanes, MaxConnections, APIToken string
}

func (n *Names) withDefaults() {
	setName(&n.QueueCapacity, "Config.QueueCapacity")
	setName(&n.QueueTimeout, "Config.QueueTimeout")
	setName(&n.MaxBufferedBytes, "Config.MaxBufferedBytes")
	setName(&n.MaxLanes, "Config.MaxLanes")
	setName(&n.MaxConnections, "Config.MaxConnections")
	setName(&n.APIToken, "Config.APIToken")
}

func setName(n *string, def string) {
	if *n == "" {
		*n = def
	}
}

// Defaults of the Config fields.
const (
	DefaultMaxBodyBytes        = 32 << 20
	DefaultMaxResponseBytes    = 64 << 20
	DefaultMaxBufferedBytes    = 256 << 20
	DefaultAttemptTimeout      = 10 * time.Minute
	DefaultStreamIdleTimeout   = 5 * time.Minute
	DefaultConnectTimeout      = 10 * time.Second
	DefaultIdleConnTimeout     = 60 * time.Second
	DefaultMaxConnsPerUpstream = lane.DefaultMaxConnsPerUpstream
	DefaultReadTimeout         = 60 * time.Second
	DefaultClientIdleTimeout   = 120 * time.Second
	DefaultMaxRetries          = 10
	DefaultQueueTimeout        = 10 * time.Minute
	DefaultQueueCapacity       = lane.DefaultQueueCapacity
	DefaultMaxPause            = lane.DefaultMaxPause
	DefaultBackoffBase         = 500 * time.Millisecond
	DefaultBackoffMax          = lane.DefaultMaxBackoff
	DefaultMaxLanes            = lane.DefaultMaxLanes
	DefaultMaxTenants          = lane.DefaultMaxTenants
	DefaultSyncInterval        = lane.DefaultSyncInterval
	DefaultMaxConcurrency      = 64

	// MaxRetriesCeiling bounds a call's X-Governor-Max-Retries.
	MaxRetriesCeiling = 100
)

// bufferResponseBytes is the largest body buffer kept for reuse once its
// answer has been written.
const bufferResponseBytes = 1 << 20

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Upstream == nil {
		return out, errors.New("proxy: no upstream")
	}
	if out.Metrics == nil {
		return out, errors.New("proxy: no metrics set")
	}
	setDefault(&out.MaxBodyBytes, DefaultMaxBodyBytes)
	setDefault(&out.MaxResponseBytes, DefaultMaxResponseBytes)
	setDefault(&out.MaxBufferedBytes, DefaultMaxBufferedBytes)
	setDefault(&out.AttemptTimeout, DefaultAttemptTimeout)
	setDefault(&out.StreamIdleTimeout, DefaultStreamIdleTimeout)
	setDefault(&out.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&out.IdleConnTimeout, DefaultIdleConnTimeout)
	setDefault(&out.MaxConnsPerUpstream, DefaultMaxConnsPerUpstream)
	setDefault(&out.ReadTimeout, DefaultReadTimeout)
	setDefault(&out.ClientIdleTimeout, DefaultClientIdleTimeout)
	switch {
	case out.MaxRetries == 0:
		out.MaxRetries = DefaultMaxRetries
	case out.MaxRetries < 0:
		out.MaxRetries = 0
	}
	out.MaxRetries = min(out.MaxRetries, MaxRetriesCeiling)
	setDefault(&out.QueueTimeout, DefaultQueueTimeout)
	setDefault(&out.QueueCapacity, DefaultQueueCapacity)
	setDefault(&out.MaxPause, DefaultMaxPause)
	setDefault(&out.BackoffBase, DefaultBackoffBase)
	setDefault(&out.BackoffMax, DefaultBackoffMax)
	setDefault(&out.MaxLanes, DefaultMaxLanes)
	setDefault(&out.MaxTenants, DefaultMaxTenants)
	setDefault(&out.AIMD.Max, DefaultMaxConcurrency)
	setDefault(&out.SyncInterval, DefaultSyncInterval)
	if err := out.AIMD.Validate(); err != nil {
		return out, fmt.Errorf("proxy: aimd: %w", err)
	}
	out.Names.withDefaults()
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	for _, r := range out.Routes {
		if r.URL == nil {
			return out, fmt.Errorf("proxy: route %q has no url", r.Name)
		}
		if err := validRouteName(r.Name); err != nil {
			return out, fmt.Errorf("proxy: route: %w", err)
		}
	}
	return out, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
