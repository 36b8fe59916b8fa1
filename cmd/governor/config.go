package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/proxy"
)

// config is Governor's configuration, read from GOVERNOR_* environment
// variables. This file is the only place their names appear. The help tag
// is what `governor -h` prints.
type config struct {
	Listen            string        `env:"GOVERNOR_LISTEN" envDefault:"127.0.0.1:8080" help:"main listener: forwarded calls and /governor/*"`
	AdminListen       string        `env:"GOVERNOR_ADMIN_LISTEN" envDefault:":9090" help:"admin listener: /metrics, /healthz, /readyz"`
	Upstream          string        `env:"GOVERNOR_UPSTREAM" envDefault:"https://api.openai.com" help:"default upstream base URL"`
	Routes            string        `env:"GOVERNOR_ROUTES" help:"prefix routes name=url,...: /name/... goes to url/... with /name stripped"`
	MaxBodyBytes      int           `env:"GOVERNOR_MAX_BODY_BYTES" envDefault:"33554432" help:"largest request body; larger gets 413"`
	MaxBufferedBytes  int64         `env:"GOVERNOR_MAX_BUFFERED_BYTES" envDefault:"268435456" help:"request bodies held at once by calls waiting or in flight; beyond it 503 with Retry-After, before the body is read (a chunked body takes GOVERNOR_MAX_BODY_BYTES, or what is left); successful answers read whole are bounded by as much again, apart, and one that does not fit is streamed instead"`
	AttemptTimeout    time.Duration `env:"GOVERNOR_ATTEMPT_TIMEOUT" envDefault:"10m" help:"one attempt, from dispatch until the answer (for a stream, its headers)"`
	StreamIdleTimeout time.Duration `env:"GOVERNOR_STREAM_IDLE_TIMEOUT" envDefault:"5m" help:"a streamed answer silent this long is ended (a batch item's: keep-alive events such as pings are silence)"`
	ConnectTimeout    time.Duration `env:"GOVERNOR_CONNECT_TIMEOUT" envDefault:"10s" help:"dialing an upstream (its TLS handshake included), and waiting for a free connection to it"`
	DrainTimeout      time.Duration `env:"GOVERNOR_DRAIN_TIMEOUT" envDefault:"30s" help:"after SIGTERM/SIGINT/SIGHUP, time to finish queued and in-flight work (and for clients to fetch the results of batch jobs held in memory)"`
	MaxConcurrency    int           `env:"GOVERNOR_MAX_CONCURRENCY" envDefault:"64" help:"upper bound of each lane's concurrency target"`
	MaxConnsPerUp     int           `env:"GOVERNOR_MAX_CONNS_PER_UPSTREAM" envDefault:"1024" help:"connections to one upstream, shared by its lanes; calls beyond it wait for a connection (at most GOVERNOR_CONNECT_TIMEOUT, and within GOVERNOR_ATTEMPT_TIMEOUT: a longer wait is a connection error, retried, that does not cut the lane)"`
	MaxRetries        int           `env:"GOVERNOR_MAX_RETRIES" envDefault:"10" help:"failed attempts a call retries; a 429 while the lane's other calls are being served does not count (per call: X-Governor-Max-Retries)"`
	QueueTimeout      time.Duration `env:"GOVERNOR_QUEUE_TIMEOUT" envDefault:"10m" help:"longest wait in a lane's queue before a 504"`
	QueueCapacity     int           `env:"GOVERNOR_QUEUE_CAPACITY" envDefault:"10000" help:"waiting calls per lane; beyond it, 503 with Retry-After"`
	MaxPause          time.Duration `env:"GOVERNOR_MAX_PAUSE" envDefault:"60s" help:"longest lane pause a provider's Retry-After can impose"`
	BackoffBase       time.Duration `env:"GOVERNOR_BACKOFF_BASE" envDefault:"500ms" help:"first retry backoff without a provider hint (exponential, full jitter)"`
	BackoffMax        time.Duration `env:"GOVERNOR_BACKOFF_MAX" envDefault:"30s" help:"longest retry backoff without a provider hint"`
	MaxConnections    int           `env:"GOVERNOR_MAX_CONNECTIONS" envDefault:"0" help:"client connections open on the main listener; beyond it a new one gets 503 and is closed (the admin listener: at most 64); 0 = three quarters of the open-file limit, and at most one per 32 KiB of the memory limit (GOMEMLIMIT or the container's)"`
	MaxLanes          int           `env:"GOVERNOR_MAX_LANES" envDefault:"256" help:"lanes (upstream, credential, model) before new models share one lane and new credentials replace idle lanes"`
	MaxTenants        int           `env:"GOVERNOR_MAX_TENANTS" envDefault:"100" help:"tenants (X-Governor-Tenant) sharing one lane fairly; further tenants count as one"`
	BatchMaxItems     int           `env:"GOVERNOR_BATCH_MAX_ITEMS" envDefault:"50000" help:"requests in one batch; more gets 400"`
	BatchWindow       int           `env:"GOVERNOR_BATCH_WINDOW" envDefault:"0" help:"items of one batch waiting or in flight at once; 0 = twice GOVERNOR_MAX_CONCURRENCY"`
	BatchMaxJobs      int           `env:"GOVERNOR_BATCH_MAX_JOBS" envDefault:"100" help:"async batch jobs held, running or finished; a new job beyond it forgets a finished job whose results were read to the end or that was deleted, else gets 503"`
	BatchMaxResponse  int           `env:"GOVERNOR_BATCH_MAX_RESPONSE_BYTES" envDefault:"8388608" help:"one batch item's answer, read whole and kept; a larger one fails its item"`
	BatchTTL          time.Duration `env:"GOVERNOR_BATCH_TTL" envDefault:"1h" help:"how long a finished async batch job's results are kept (in memory, or on disk with GOVERNOR_BATCH_DIR)"`
	BatchDir          string        `env:"GOVERNOR_BATCH_DIR" help:"directory where async batch jobs are kept: they resume after a restart and their results are read from disk; one Governor at a time (another started on it answers the async job endpoints 503 until it can take it); empty = memory only: a shutdown ends the jobs (items started finish within the drain, the others DID_NOT_RUN) and their results go with the process, served during the drain until read or deleted (jobs a client asked about within the minute before)"`

	BatchMaxResultBytes int64 `env:"GOVERNOR_BATCH_MAX_RESULT_BYTES" envDefault:"268435456" help:"answer bytes batches keep in memory, all together: async jobs without GOVERNOR_BATCH_DIR, and sync batches until their answer is written (progress lines keep none); beyond it finished jobs are forgotten early, those whose results were read or that were deleted first, and when running batches fill it new answers are dropped (their items FAILED) and new batches get 503"`

	AIMDPreset              string        `env:"GOVERNOR_AIMD_PRESET" envDefault:"default" help:"controller: default, or phoenix (Arize Phoenix's ConcurrencyController exactly); each GOVERNOR_AIMD_* left at 0 takes the chosen preset's value"`
	AIMDInitial             float64       `env:"GOVERNOR_AIMD_INITIAL" envDefault:"0" help:"starting target (default preset: the level a new lane's start climbs to, see GOVERNOR_AIMD_ADMISSION_WINDOW); 0 = preset default (phoenix: max, default: min(max, 8)); default preset: also the share above which a lane gives slots back, so replicas sharing an account without Redis settle near it (set about the account's concurrency / replicas)"`
	AIMDWindow              time.Duration `env:"GOVERNOR_AIMD_WINDOW" envDefault:"5s" help:"phoenix: feedback window"`
	AIMDIncreaseStep        float64       `env:"GOVERNOR_AIMD_INCREASE_STEP" envDefault:"0" help:"0 = preset default (phoenix: +0.5 per clean window; default: +1 first probe per round trip)"`
	AIMDDecreaseRatio       float64       `env:"GOVERNOR_AIMD_DECREASE_RATIO" envDefault:"0" help:"0 = preset default (phoenix: x0.5 per window with a 429/timeout; default: x0.9 per fresh signal)"`
	AIMDRepeatDecreaseRatio float64       `env:"GOVERNOR_AIMD_REPEAT_DECREASE_RATIO" envDefault:"0.5" help:"default preset: cut when the previous cut did not help"`
	AIMDProbeHold           int           `env:"GOVERNOR_AIMD_PROBE_HOLD" envDefault:"4" help:"default preset: most clean round trips held below the last decrease level before probing (1 + limit/3, at most this)"`
	AIMDCollapseWindow      time.Duration `env:"GOVERNOR_AIMD_COLLAPSE_WINDOW" envDefault:"15s" help:"span within which GOVERNOR_AIMD_COLLAPSE_THRESHOLD signals collapse the target to 1"`
	AIMDCollapseThreshold   int           `env:"GOVERNOR_AIMD_COLLAPSE_THRESHOLD" envDefault:"2" help:"signals within the collapse window that collapse the target"`
	AIMDLatencyAlpha        float64       `env:"GOVERNOR_AIMD_LATENCY_ALPHA" envDefault:"0.2" help:"weight of a new latency in the latency EWMA"`
	AIMDAdmissionWindow     time.Duration `env:"GOVERNOR_AIMD_ADMISSION_WINDOW" envDefault:"0" help:"default preset: a new lane starts with one call and adds one toward GOVERNOR_AIMD_INITIAL each time its calls go unrefused this long, half as long after the first step (or twice the upstream's quickest 429 so far, if longer, at most 1s; plus the time for the upstream's connections to open and a round trip over them); 0 = 4ms, negative = start at GOVERNOR_AIMD_INITIAL at once"`
	AIMDLatencyTolerance    float64       `env:"GOVERNOR_AIMD_LATENCY_TOLERANCE" envDefault:"0" help:"default preset: calls sent at a higher concurrency taking over this many times as long as at the lowest (more if latency varies more) mean the provider is queueing them; 0 = 1.25, negative = ignore latency"`
	RedisURL                string        `env:"GOVERNOR_REDIS_URL" secret:"true" help:"redis:// or rediss:// URL: share every lane with the other Governors using the same Redis (see README, Running many replicas); empty = govern alone; a Redis down is waited for, one that refuses the URL's credentials or database stops the start-up"`
	RedisAuthFailure        string        `env:"GOVERNOR_REDIS_AUTH_FAILURE" envDefault:"stop" help:"when Redis refuses GOVERNOR_REDIS_URL's credentials or database at start: stop (exit 1, the URL is wrong), or local (serve, governing alone, and join once Redis accepts them)"`
	RedisTimeout            time.Duration `env:"GOVERNOR_REDIS_TIMEOUT" envDefault:"50ms" help:"longest wait for Redis; slower means governing locally until it answers again"`
	RedisSyncInterval       time.Duration `env:"GOVERNOR_REDIS_SYNC_INTERVAL" envDefault:"50ms" help:"how often lanes are synced with the other Governors (each sync: one Redis script per lane)"`
	RedisLeaseTTL           time.Duration `env:"GOVERNOR_REDIS_LEASE_TTL" envDefault:"3s" help:"a Governor that stops syncing gives its share back after this long"`
	Instance                string        `env:"GOVERNOR_INSTANCE" help:"this Governor's name among the others in Redis; empty = hostname-pid-random"`
	APIToken                string        `env:"GOVERNOR_API_TOKEN" secret:"true" help:"if set, /governor/* requires the header X-Governor-Token: <token> (set it when GOVERNOR_LISTEN is not loopback); the live page /governor/ui asks for it"`
	LogLevel                string        `env:"GOVERNOR_LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error"`
	LogFormat               string        `env:"GOVERNOR_LOG_FORMAT" envDefault:"auto" help:"auto, json or text (to stderr); auto = text on a terminal, JSON otherwise"`
	AccessLog               bool          `env:"GOVERNOR_ACCESS_LOG" envDefault:"false" help:"one line per call and per batch item (method, path, lane, code, status, attempts, queue_ms, upstream_ms, bytes_in, bytes_out, request_id; a call's errors of failed attempts; a stream's stream_end), at info level whatever GOVERNOR_LOG_LEVEL"`
}

// parsed is config turned into the values the packages take.
type parsed struct {
	config
	upstream  proxy.Route // Name unused
	routes    []proxy.Route
	logLevel  slog.Level
	logFormat string       // json or text once run has resolved auto
	access    *slog.Logger // the access log; nil without GOVERNOR_ACCESS_LOG
	aimd      aimd.Config
	redis     *redis.Options // nil without GOVERNOR_REDIS_URL
}

// configError is an invalid setting; main exits 2 with its message, which
// names the variable and, for a value Governor could not use, quotes the
// value and says what is wanted: GOVERNOR_MAX_RETRIES="x": want a whole
// number.
type configError struct {
	variable string
	value    *setting // nil: the message quotes no value
	err      error
}

// setting is one variable's value as loadConfig read it.
type setting struct {
	text      string
	isDefault bool // unset or empty: text is the default
}

func (e *configError) Error() string {
	if e.value == nil {
		return fmt.Sprintf("%s: %v", e.variable, e.err)
	}
	if e.value.isDefault {
		return fmt.Sprintf("%s=%q (its default): %v", e.variable, e.value.text, e.err)
	}
	return fmt.Sprintf("%s=%q: %v", e.variable, e.value.text, e.err)
}

func (e *configError) Unwrap() error { return e.err }

// settings holds every variable's value as read, to quote in errors.
type settings map[string]setting

// bad reports that variable's value is not what is wanted.
func (s settings) bad(variable, want string) *configError {
	v := s[variable]
	return &configError{variable: variable, value: &v, err: errors.New(want)}
}

// loadConfig reads the configuration from environ (KEY=VALUE pairs) and
// validates it. Its errors name the variable that is wrong.
func loadConfig(environ []string) (*parsed, error) {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var c config
	read := settings{}
	opts := env.Options{Environment: vars, OnSet: func(name string, value any, isDefault bool) {
		read[name] = setting{fmt.Sprint(value), isDefault}
	}}
	if err := env.ParseWithOptions(&c, opts); err != nil {
		return nil, envError(err, read)
	}
	p := &parsed{config: c}
	u, err := proxy.ParseUpstreamURL(c.Upstream)
	if err != nil {
		return nil, &configError{variable: "GOVERNOR_UPSTREAM", err: err}
	}
	p.upstream.URL = u
	if p.routes, err = proxy.ParseRoutes(c.Routes); err != nil {
		return nil, &configError{variable: "GOVERNOR_ROUTES", err: err}
	}
	for _, r := range p.routes {
		if r.Name == "default" {
			return nil, &configError{variable: "GOVERNOR_ROUTES", err: errors.New(`route name "default" is taken by GOVERNOR_UPSTREAM`)}
		}
	}
	for _, l := range []struct{ name, addr string }{{"GOVERNOR_LISTEN", c.Listen}, {"GOVERNOR_ADMIN_LISTEN", c.AdminListen}} {
		if !validListenAddr(l.addr) {
			return nil, read.bad(l.name, "want host:port or :port, such as 127.0.0.1:8080, with a port from 0 to 65535")
		}
	}
	if err := p.logLevel.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, read.bad("GOVERNOR_LOG_LEVEL", "want debug, info, warn or error")
	}
	switch c.RedisAuthFailure {
	case "stop", "local":
	default:
		return nil, read.bad("GOVERNOR_REDIS_AUTH_FAILURE", "want stop or local")
	}
	switch c.LogFormat {
	case "auto", "json", "text":
		p.logFormat = c.LogFormat
	default:
		return nil, read.bad("GOVERNOR_LOG_FORMAT", "want auto, json or text")
	}
	if err := c.checkBounds(read); err != nil {
		return nil, err
	}
	preset, err := aimd.ParsePreset(c.AIMDPreset)
	if err != nil {
		return nil, read.bad("GOVERNOR_AIMD_PRESET", "want default or phoenix")
	}
	if err := c.checkAIMD(read); err != nil {
		return nil, err
	}
	p.aimd = aimd.Config{
		Preset:              preset,
		Max:                 c.MaxConcurrency,
		Initial:             c.AIMDInitial,
		Window:              c.AIMDWindow,
		IncreaseStep:        c.AIMDIncreaseStep,
		DecreaseRatio:       c.AIMDDecreaseRatio,
		RepeatDecreaseRatio: c.AIMDRepeatDecreaseRatio,
		ProbeHold:           c.AIMDProbeHold,
		CollapseWindow:      c.AIMDCollapseWindow,
		CollapseThreshold:   c.AIMDCollapseThreshold,
		LatencyAlpha:        c.AIMDLatencyAlpha,
		LatencyTolerance:    c.AIMDLatencyTolerance,
		AdmissionWindow:     c.AIMDAdmissionWindow,
	}
	if err := p.aimd.Validate(); err != nil {
		return nil, &configError{variable: "GOVERNOR_AIMD_*", err: err}
	}
	if err := p.parseRedis(read); err != nil {
		return nil, err
	}
	if isOwnListener(c.Listen, p.upstream.URL) {
		return nil, &configError{variable: "GOVERNOR_UPSTREAM", err: ownListenerError(c.Listen, p.upstream.URL)}
	}
	for _, r := range p.routes {
		if isOwnListener(c.Listen, r.URL) {
			return nil, &configError{variable: "GOVERNOR_ROUTES", err: fmt.Errorf("route %s: %w", r.Name, ownListenerError(c.Listen, r.URL))}
		}
	}
	return p, nil
}

// validListenAddr reports whether addr is a TCP listen address in form:
// host:port or :port, the port a number from 0 to 65535, a service name
// or empty (any free port, as 0).
// Whether the host resolves, or the port is free, is learnt when listening.
func validListenAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if port == "" {
		return true // any free port, as 0
	}
	_, err = net.LookupPort("tcp", port)
	return err == nil
}

// isOwnListener reports whether u, an upstream, is Governor's own main
// listener at listen: the same port, and a host that dials the listener's
// socket. That is the listener's own address (written in any form), or,
// for a listener on every address (":8080", 0.0.0.0, [::]), any loopback
// address or localhost; localhost and 0.0.0.0 dial 127.0.0.1 or ::1, so
// they are a listener on those. Another loopback address (127.0.0.2) is
// another socket. Every call sent to its own listener would come back as
// a new call, each holding a slot of its lane, until the attempt timeout.
func isOwnListener(listen string, u *url.URL) bool {
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport == "0" {
		return false
	}
	uport := u.Port()
	if uport == "" {
		uport = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if uport != lport {
		return false
	}
	lhost, uhost := strings.ToLower(lhost), strings.ToLower(u.Hostname())
	lip, uip := net.ParseIP(lhost), net.ParseIP(uhost)
	if lhost == uhost || lip != nil && lip.Equal(uip) {
		return true
	}
	// localhost and an unspecified address, dialled, reach 127.0.0.1 or ::1.
	dialsLocalhost := uhost == "localhost" || uip != nil && uip.IsUnspecified()
	switch {
	case lhost == "" || lip != nil && lip.IsUnspecified():
		return dialsLocalhost || uip != nil && uip.IsLoopback()
	case lhost == "localhost":
		return uip != nil && (uip.Equal(net.IPv4(127, 0, 0, 1)) || uip.Equal(net.IPv6loopback) || uip.IsUnspecified())
	case lip != nil && (lip.Equal(net.IPv4(127, 0, 0, 1)) || lip.Equal(net.IPv6loopback)):
		return dialsLocalhost
	}
	return false
}

func ownListenerError(listen string, u *url.URL) error {
	return fmt.Errorf("%s is Governor's own listener (GOVERNOR_LISTEN=%s): every call would come back to Governor; point it at the provider", u.Redacted(), listen)
}

// checkBounds reports the first number or duration out of its range.
func (c config) checkBounds(read settings) error {
	for _, v := range []struct {
		name, want string
		ok         bool
	}{
		{"GOVERNOR_MAX_BODY_BYTES", wantBytes, c.MaxBodyBytes > 0},
		{"GOVERNOR_ATTEMPT_TIMEOUT", wantPositiveDuration, c.AttemptTimeout > 0},
		{"GOVERNOR_STREAM_IDLE_TIMEOUT", wantPositiveDuration, c.StreamIdleTimeout > 0},
		{"GOVERNOR_CONNECT_TIMEOUT", wantPositiveDuration, c.ConnectTimeout > 0},
		{"GOVERNOR_DRAIN_TIMEOUT", wantPositiveDuration, c.DrainTimeout > 0},
		{"GOVERNOR_MAX_CONCURRENCY", wantAtLeastOne, c.MaxConcurrency >= 1},
		{"GOVERNOR_MAX_CONNS_PER_UPSTREAM", wantAtLeastOne, c.MaxConnsPerUp >= 1},
		{"GOVERNOR_MAX_RETRIES", fmt.Sprintf("want a whole number from 0 to %d", proxy.MaxRetriesCeiling),
			c.MaxRetries >= 0 && c.MaxRetries <= proxy.MaxRetriesCeiling},
		{"GOVERNOR_QUEUE_TIMEOUT", wantPositiveDuration, c.QueueTimeout > 0},
		{"GOVERNOR_QUEUE_CAPACITY", wantAtLeastOne, c.QueueCapacity >= 1},
		{"GOVERNOR_MAX_PAUSE", wantPositiveDuration, c.MaxPause > 0},
		{"GOVERNOR_BACKOFF_BASE", wantPositiveDuration, c.BackoffBase > 0},
		{"GOVERNOR_BACKOFF_MAX", fmt.Sprintf("want a duration at least GOVERNOR_BACKOFF_BASE (%s)", c.BackoffBase),
			c.BackoffMax >= c.BackoffBase},
		{"GOVERNOR_MAX_LANES", wantAtLeastOne, c.MaxLanes >= 1},
		{"GOVERNOR_MAX_TENANTS", wantAtLeastOne, c.MaxTenants >= 1},
		{"GOVERNOR_MAX_CONNECTIONS", "want 0 (set from the open-file and memory limits) or a whole number above it",
			c.MaxConnections >= 0},
		{"GOVERNOR_MAX_BUFFERED_BYTES", wantBytes, c.MaxBufferedBytes >= 1},
		{"GOVERNOR_BATCH_MAX_RESPONSE_BYTES", wantBytes, c.BatchMaxResponse >= 1},
		{"GOVERNOR_BATCH_MAX_ITEMS", wantAtLeastOne, c.BatchMaxItems >= 1},
		{"GOVERNOR_BATCH_WINDOW", "want 0 (twice GOVERNOR_MAX_CONCURRENCY) or a whole number above it",
			c.BatchWindow >= 0},
		{"GOVERNOR_BATCH_MAX_JOBS", wantAtLeastOne, c.BatchMaxJobs >= 1},
		{"GOVERNOR_BATCH_TTL", wantPositiveDuration, c.BatchTTL > 0},
		{"GOVERNOR_BATCH_MAX_RESULT_BYTES", wantBytes, c.BatchMaxResultBytes >= 1},
	} {
		if !v.ok {
			return read.bad(v.name, v.want)
		}
	}
	return nil
}

// checkAIMD reports the first GOVERNOR_AIMD_* value out of its range, in
// the words of governor -h; aimd.Config.Validate then checks them together.
func (c config) checkAIMD(read settings) error {
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	ratio := func(f float64) bool { return finite(f) && f >= 0 && f < 1 }
	for _, v := range []struct {
		name, want string
		ok         bool
	}{
		{"GOVERNOR_AIMD_INITIAL", fmt.Sprintf("want 0 (the preset's) or a number up to GOVERNOR_MAX_CONCURRENCY (%d)", c.MaxConcurrency),
			finite(c.AIMDInitial) && c.AIMDInitial >= 0 && c.AIMDInitial <= float64(c.MaxConcurrency)},
		{"GOVERNOR_AIMD_WINDOW", wantDuration0, c.AIMDWindow >= 0},
		{"GOVERNOR_AIMD_INCREASE_STEP", "want 0 (the preset's) or a positive number such as 1",
			finite(c.AIMDIncreaseStep) && c.AIMDIncreaseStep >= 0},
		{"GOVERNOR_AIMD_DECREASE_RATIO", wantRatio, ratio(c.AIMDDecreaseRatio)},
		{"GOVERNOR_AIMD_REPEAT_DECREASE_RATIO", wantRatio, ratio(c.AIMDRepeatDecreaseRatio)},
		{"GOVERNOR_AIMD_PROBE_HOLD", "want a whole number, 0 or more", c.AIMDProbeHold >= 0},
		{"GOVERNOR_AIMD_COLLAPSE_WINDOW", wantDuration0, c.AIMDCollapseWindow >= 0},
		{"GOVERNOR_AIMD_COLLAPSE_THRESHOLD", "want a whole number, 0 or more", c.AIMDCollapseThreshold >= 0},
		{"GOVERNOR_AIMD_LATENCY_ALPHA", "want a number from 0 to 1, such as 0.2",
			finite(c.AIMDLatencyAlpha) && c.AIMDLatencyAlpha >= 0 && c.AIMDLatencyAlpha <= 1},
		{"GOVERNOR_AIMD_ADMISSION_WINDOW", "want a duration of at most 1m, such as 4ms", c.AIMDAdmissionWindow <= time.Minute},
		{"GOVERNOR_AIMD_LATENCY_TOLERANCE", "want a number above 1 such as 1.25, 0 (1.25) or a negative number (ignore latency)",
			finite(c.AIMDLatencyTolerance) && (c.AIMDLatencyTolerance <= 0 || c.AIMDLatencyTolerance > 1)},
	} {
		if !v.ok {
			return read.bad(v.name, v.want)
		}
	}
	return nil
}

// What a variable wants, in the words of its error.
const (
	wantWholeNumber      = "want a whole number"
	wantAtLeastOne       = "want a whole number, 1 or more"
	wantBytes            = "want a number of bytes, 1 or more, without a unit (33554432 for 32 MiB)"
	wantNumber           = "want a number such as 0.5"
	wantDuration         = "want a duration such as 30s or 2m"
	wantPositiveDuration = "want a duration above zero, such as 30s or 2m"
	wantDuration0        = "want a duration, 0 or more, such as 5s"
	wantBool             = "want true or false"
	wantRatio            = "want 0 (the preset's) or a number above 0 and below 1, such as 0.9"
)

// parseRedis validates the coordination settings.
func (p *parsed) parseRedis(read settings) error {
	c := p.config
	if c.RedisTimeout <= 0 {
		return read.bad("GOVERNOR_REDIS_TIMEOUT", wantPositiveDuration)
	}
	if c.RedisSyncInterval <= 0 {
		return read.bad("GOVERNOR_REDIS_SYNC_INTERVAL", wantPositiveDuration)
	}
	if c.RedisLeaseTTL < 2*c.RedisSyncInterval {
		return read.bad("GOVERNOR_REDIS_LEASE_TTL", fmt.Sprintf("want a duration at least twice GOVERNOR_REDIS_SYNC_INTERVAL (%s)", 2*c.RedisSyncInterval))
	}
	if len(c.Instance) > 128 || strings.IndexFunc(c.Instance, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r))
	}) >= 0 {
		return read.bad("GOVERNOR_INSTANCE", "want at most 128 letters, digits, '.', '_', ':' or '-'")
	}
	if c.RedisURL == "" {
		return nil
	}
	opts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		// url.Parse quotes the URL, password included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &configError{variable: "GOVERNOR_REDIS_URL", err: fmt.Errorf("want redis://[user:password@]host:port[/db] or rediss://...: %v", err)}
	}
	p.redis = opts
	return nil
}

// envError turns env's errors, which name struct fields and quote Go's
// parsers, into one that names the variable, quotes its value and says
// what is wanted.
func envError(err error, read settings) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	f, ok := reflect.TypeFor[config]().FieldByName(pe.Name)
	if !ok {
		return err
	}
	name := f.Tag.Get("env")
	if f.Tag.Get("secret") == "true" {
		return &configError{variable: name, err: errors.New("not a value Governor can use")}
	}
	return read.bad(name, wantOfType(f.Type, name, pe.Err))
}

// wantOfType says what a variable of type t wants, given the error its
// value got.
func wantOfType(t reflect.Type, name string, err error) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return wantDuration
	case t.Kind() == reflect.Bool:
		return wantBool
	case t.Kind() == reflect.Float64:
		return wantNumber
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		if strings.HasSuffix(name, "_BYTES") {
			return wantBytes
		}
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Sprintf("want a whole number no larger than %d", int64(math.MaxInt64>>(64-t.Bits())))
		}
		return wantWholeNumber
	}
	return "want a " + t.String() + ": " + err.Error()
}

// writeUsage prints the flags and every variable with its default and meaning.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, `Governor governs how fast applications call their LLM providers.

Usage:
  governor [-demo] [-version]
  governor batch [-url URL] [-o FILE] [-job ID] [flags] input.jsonl

Flags:
  -demo      run in front of a built-in simulated provider (offline)
  -version   print the version and exit
  -h         print this help

governor batch submits an OpenAI Batch JSONL file to a running Governor as
an async job, shows its progress on stderr and writes the results in input
order (exit 0: all completed, 1: some failed or did not run, 2: usage);
governor batch -h for its flags.

Configuration (environment variables, with defaults; a variable set to
the empty string is read as unset):
`)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		f := t.Field(i)
		def := f.Tag.Get("envDefault")
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Tag.Get("env"), def, f.Tag.Get("help"))
	}
	tw.Flush()
}

// batchWindow is GOVERNOR_BATCH_WINDOW, its 0 resolved.
func (p *parsed) batchWindow() int {
	if p.BatchWindow == 0 {
		return 2 * p.MaxConcurrency
	}
	return p.BatchWindow
}

// effective returns the configuration in effect, as the start-up line shows
// it: every "0 = default" resolved, the log format chosen, the upstream and
// routes as -demo sets them, URLs without their passwords.
func (p *parsed) effective() config {
	c := p.config
	c.Upstream = p.upstream.URL.Redacted()
	routes := make([]string, 0, len(p.routes))
	for _, r := range p.routes {
		routes = append(routes, r.Name+"="+r.URL.Redacted())
	}
	c.Routes = strings.Join(routes, ",")
	c.BatchWindow = p.batchWindow()
	c.LogFormat = p.logFormat
	a := aimd.New(p.aimd, time.Now()).Config()
	c.AIMDInitial, c.AIMDWindow = a.Initial, a.Window
	c.AIMDIncreaseStep, c.AIMDDecreaseRatio, c.AIMDRepeatDecreaseRatio = a.IncreaseStep, a.DecreaseRatio, a.RepeatDecreaseRatio
	c.AIMDProbeHold, c.AIMDCollapseWindow, c.AIMDCollapseThreshold = a.ProbeHold, a.CollapseWindow, a.CollapseThreshold
	c.AIMDLatencyAlpha, c.AIMDLatencyTolerance = a.LatencyAlpha, a.LatencyTolerance
	c.AIMDAdmissionWindow = a.AdmissionWindow
	return c
}

// logAttrs renders the configuration for the start-up log, one attribute
// per variable, with secrets redacted.
func (c config) logAttrs() []any {
	v := reflect.ValueOf(c)
	t := v.Type()
	attrs := make([]any, 0, t.NumField())
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("env")
		val := v.Field(i).Interface()
		if t.Field(i).Tag.Get("secret") == "true" {
			val = "unset"
			if v.Field(i).String() != "" {
				val = "set (redacted)"
			}
		}
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		attrs = append(attrs, slog.Any(name, val))
	}
	return attrs
}

// variable is the name of the environment variable that sets field of
// config. An unknown field is a programmer error.
func variable(field string) string {
	f, ok := reflect.TypeFor[config]().FieldByName(field)
	if !ok || f.Tag.Get("env") == "" {
		panic("governor: no variable sets config." + field)
	}
	return f.Tag.Get("env")
}
