package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/internal/fdlimit"
	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/proxy"
	"github.com/llmgovernor/governor/ui"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module's build information.
var version = ""

func main() {
	if len(os.Args) > 1 && os.Args[1] == "batch" {
		os.Exit(runBatchCommand(os.Args[2:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
	}
	// The metrics package's switch for # TYPE lines on the Go runtime's
	// and the process's metrics (writeMetrics writes Governor's own).
	metrics.ExposeMetadata(true)
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2 // bad flag or bad configuration
)

// run is main with its inputs explicit, so tests can call it.
func run(args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("governor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	demo := fs.Bool("demo", false, "")
	showVersion := fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "governor: %v\n\n", err)
		writeUsage(stderr)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "governor: unexpected argument %q (configuration is read from GOVERNOR_* variables; the only subcommand is batch; see governor -h)\n", fs.Arg(0))
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "governor %s (%s %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		fmt.Fprintf(stderr, "governor: invalid configuration: %v\n", err)
		return exitUsage
	}
	if cfg.logFormat == "auto" {
		cfg.logFormat = "json"
		if isTerminal(stderr) {
			cfg.logFormat = "text"
		}
	}
	log := newLogger(stderr, cfg.logFormat, cfg.logLevel)
	if cfg.AccessLog {
		// Its lines are written whatever GOVERNOR_LOG_LEVEL says.
		cfg.access = newLogger(stderr, cfg.logFormat, slog.LevelInfo)
	}
	if err := serve(cfg, *demo, stdout, log); err != nil {
		log.Error("governor stopped", "err", err)
		return exitFailed
	}
	return exitOK
}

func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// serve wires Governor together and runs it until a signal, then drains.
func serve(cfg *parsed, demo bool, stdout io.Writer, log *slog.Logger) error {
	// Signals are caught before anything starts: a SIGTERM that comes while
	// Governor starts (Kubernetes stops pods whenever it likes) drains it
	// once it has started, where the default action would kill it, even
	// after it has said it started and reported ready. A hang-up (the
	// terminal closes, kill -HUP) drains it too: Go's default would end it
	// at once, dropping every call in progress. A hang-up or an interrupt
	// ignored when Governor starts (nohup; a shell script's background
	// job, governor &) stays ignored: Notify would install a handler in
	// place of the SIG_IGN that asked for it to run on. SIGTERM is always
	// caught.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGTERM)
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Notify(sigc, sig)
		}
	}
	defer signal.Stop(sigc)
	// A log reader that goes away (stderr piped to a process that exits)
	// costs the log lines, not the calls in progress: without this, the
	// next line written to the broken pipe ends the process (SIGPIPE).
	signal.Ignore(syscall.SIGPIPE)

	if demo {
		stop, err := startDemo(cfg)
		if err != nil {
			return err
		}
		defer stop()
	}

	openFiles, memLimit, maxConns := connectionLimits(cfg, log)

	set, draining := newMetricsSet()

	coordinator, closeCoordinator, err := startCoordination(cfg, set, log)
	if err != nil {
		return err
	}
	if closeCoordinator != nil {
		defer closeCoordinator()
	}

	p, batches, err := startServices(cfg, maxConns, coordinator, set, log)
	if err != nil {
		return err
	}
	mainLn, adminLn, err := listen(cfg)
	if err != nil {
		stopServices(p, batches)
		return err
	}

	var ready atomic.Bool
	adminSrv := newAdminServer(&admin{set: set, ready: &ready}, maxConns)
	// Running out of file descriptors pauses the admin listener's accepts
	// (fasthttp's Serve would return); the proxy's listener does the same.
	adminLn = newAdminListener(fdlimit.Listener(adminLn, func(err error) {
		log.Warn("out of file descriptors: new admin connections wait until some close", "err", err)
	}), adminConnections(maxConns))
	errc := make(chan error, 2)
	go func() { errc <- serveListener("admin", adminSrv.Serve, adminLn) }()
	go func() { errc <- serveListener("main", p.Serve, mainLn) }()

	routes := make([]string, 0, len(cfg.routes))
	for _, r := range cfg.routes {
		routes = append(routes, r.Name+"="+r.URL.Redacted())
	}
	log.Info("governor started", "version", buildVersion(), "listen", mainLn.Addr().String(),
		"admin_listen", adminLn.Addr().String(), "open_files", openFiles, "memory_limit", memLimit, "max_connections", maxConns,
		"admin_max_connections", adminConnections(maxConns), "upstream", cfg.upstream.URL.Redacted(), "routes", routes, "demo", demo,
		slog.Group("config", cfg.effective().logAttrs()...))
	if cfg.APIToken == "" && !isLoopback(mainLn.Addr()) {
		log.Warn("the main listener is not on loopback and GOVERNOR_API_TOKEN is not set: anyone who reaches it can use /governor/*",
			"listen", mainLn.Addr().String())
	}
	warnConnBound(log, cfg)
	if demo {
		printDemo(stdout, mainLn.Addr().String())
	}
	ready.Store(true)

	var serveErr error
	select {
	case sig := <-sigc:
		log.Info("draining", "signal", sig.String(), "timeout", cfg.DrainTimeout.String())
	case serveErr = <-errc:
	}
	ready.Store(false)
	draining.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	go exitOnSecondSignal(ctx, sigc, log)
	drain(ctx, p, batches, log)
	_ = adminSrv.Shutdown()
	// fasthttp's Shutdown closes only a listener its Serve has reached:
	// after a signal during startup, this one may not have been.
	_ = adminLn.Close()
	log.Info("stopped")
	return serveErr
}

// newMetricsSet returns the set every package registers its metrics on,
// with Governor's own: its build and whether it drains (set draining).
func newMetricsSet() (set *metrics.Set, draining *atomic.Bool) {
	set = metrics.NewSet()
	set.NewGauge(fmt.Sprintf(`governor_build_info{version=%q,goversion=%q}`, buildVersion(), runtime.Version()),
		func() float64 { return 1 })
	draining = new(atomic.Bool)
	set.NewGauge("governor_draining", func() float64 {
		if draining.Load() {
			return 1
		}
		return 0
	})
	return set, draining
}

// startServices makes the proxy and the batch server, and the page on
// the proxy. Once it returns them, they work (the coordinator's sync
// loop, resumed async jobs) until drained or stopped with stopServices;
// if it fails, it stops what it made.
func startServices(cfg *parsed, maxConns int, coordinator lane.Coordinator, set *metrics.Set, log *slog.Logger) (*proxy.Proxy, *batch.Server, error) {
	p, err := proxy.New(proxyConfig(cfg, maxConns, coordinator, set, log))
	if err != nil {
		return nil, nil, err
	}
	batches, err := batch.New(p, batchConfig(cfg, set, log))
	if err != nil {
		stopServices(p, nil)
		if cfg.BatchDir != "" {
			return nil, nil, fmt.Errorf("GOVERNOR_BATCH_DIR=%s: %w", cfg.BatchDir, err)
		}
		return nil, nil, err
	}
	ui.Register(p)
	return p, batches, nil
}

// stopServices stops what startServices made when start-up fails after
// it: no drain, resumed async jobs stop where they are. batches may be
// nil.
func stopServices(p *proxy.Proxy, batches *batch.Server) {
	if batches != nil {
		now, cancel := context.WithCancel(context.Background())
		cancel()
		_ = batches.Shutdown(now)
	}
	_ = p.Shutdown(context.Background())
}

// listen opens the main and the admin listeners.
func listen(cfg *parsed) (mainLn, adminLn net.Listener, err error) {
	mainLn, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("main listener (GOVERNOR_LISTEN): %w", err)
	}
	adminLn, err = net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		mainLn.Close()
		return nil, nil, fmt.Errorf("admin listener (GOVERNOR_ADMIN_LISTEN): %w", err)
	}
	return mainLn, adminLn, nil
}

// connectionLimits raises the open-file limit and works out the main
// listener's connection cap from it, the memory limit and
// GOVERNOR_MAX_CONNECTIONS. Each client connection is a file descriptor:
// use all the process may have. (Go's runtime raises the soft limit too;
// this makes sure.)
func connectionLimits(cfg *parsed, log *slog.Logger) (openFiles uint64, memLimit int64, maxConns int) {
	openFiles, err := fdlimit.Raise()
	if err != nil {
		log.Warn("could not raise the open-file limit", "err", err, "limit", openFiles)
	}
	memLimit = memoryLimit()
	maxConns = maxConnections(cfg.MaxConnections, openFiles, memLimit)
	if openFiles > 0 && uint64(maxConns) >= openFiles {
		log.Warn("GOVERNOR_MAX_CONNECTIONS is not below the open-file limit: past the limit, new connections wait unanswered until some close instead of getting 503",
			"max_connections", maxConns, "open_files", openFiles)
	}
	return openFiles, memLimit, maxConns
}

// proxyConfig is the proxy's part of the configuration. maxConns is the
// connection cap worked out at start-up; coordinator is nil without Redis.
func proxyConfig(cfg *parsed, maxConns int, coordinator lane.Coordinator, set *metrics.Set, log *slog.Logger) proxy.Config {
	return proxy.Config{
		Upstream:          cfg.upstream.URL,
		Routes:            cfg.routes,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		AttemptTimeout:    cfg.AttemptTimeout,
		StreamIdleTimeout: cfg.StreamIdleTimeout,
		ConnectTimeout:    cfg.ConnectTimeout,
		MaxRetries:        proxyRetries(cfg.MaxRetries),
		QueueTimeout:      cfg.QueueTimeout,
		QueueCapacity:     cfg.QueueCapacity,
		MaxPause:          cfg.MaxPause,
		BackoffBase:       cfg.BackoffBase,
		BackoffMax:        cfg.BackoffMax,
		MaxLanes:          cfg.MaxLanes,
		MaxTenants:        cfg.MaxTenants,
		MaxConnections:    maxConns,
		MaxBufferedBytes:  cfg.MaxBufferedBytes,
		AIMD:              cfg.aimd,
		APIToken:          cfg.APIToken,
		Coordinator:       coordinator,
		SyncInterval:      cfg.RedisSyncInterval,
		LeaseTTL:          cfg.RedisLeaseTTL,
		Metrics:           set,
		Logger:            log,
		AccessLog:         cfg.access,
		Names: proxy.Names{
			QueueCapacity:    variable("QueueCapacity"),
			QueueTimeout:     variable("QueueTimeout"),
			MaxBufferedBytes: variable("MaxBufferedBytes"),
			MaxLanes:         variable("MaxLanes"),
			MaxConnections:   variable("MaxConnections"),
			APIToken:         variable("APIToken"),
		},

		// Bounds every upstream's calls in flight (see warnConnBound).
		MaxConnsPerUpstream: cfg.MaxConnsPerUp,
	}
}

// batchConfig is the batch API's part of the configuration.
func batchConfig(cfg *parsed, set *metrics.Set, log *slog.Logger) batch.Config {
	return batch.Config{
		MaxItems:         cfg.BatchMaxItems,
		Window:           cfg.batchWindow(),
		MaxJobs:          cfg.BatchMaxJobs,
		TTL:              cfg.BatchTTL,
		MaxResultBytes:   cfg.BatchMaxResultBytes,
		Dir:              cfg.BatchDir,
		WriteIdle:        cfg.StreamIdleTimeout,
		Metrics:          set,
		Logger:           log,
		AccessLog:        cfg.access,
		MaxResponseBytes: cfg.BatchMaxResponse,
		Names: batch.Names{
			MaxJobs:        variable("BatchMaxJobs"),
			TTL:            variable("BatchTTL"),
			MaxResultBytes: variable("BatchMaxResultBytes"),
			Dir:            variable("BatchDir"),
		},
	}
}

// exitOnSecondSignal ends the process at once if a second signal comes
// before ctx (the drain) ends.
func exitOnSecondSignal(ctx context.Context, sigc <-chan os.Signal, log *slog.Logger) {
	select {
	case sig := <-sigc:
		log.Warn("second signal: exiting now", "signal", sig.String())
		os.Exit(exitFailed)
	case <-ctx.Done():
	}
}

// drain stops the proxy and the batch server, giving what is in flight
// until ctx ends to finish: the calls of connected clients, sync batches
// and progress streams, and the items async jobs have started (the jobs
// start no more; see batch.Server.Shutdown).
//
// Async jobs held in memory (no GOVERNOR_BATCH_DIR) lose their results
// with the process. While some that a client followed within the minute
// before the signal (see batch.Server.Pause) have results it has not read,
// the main listener stays open first, until they are read or deleted or
// ctx ends: calls to forward, new jobs and sync batches get 503 draining,
// and the jobs' endpoints answer, so a client can fetch what a job
// finished during the drain.
func drain(ctx context.Context, p *proxy.Proxy, batches *batch.Server, log *slog.Logger) {
	if n := batches.Pause(); n > 0 {
		p.RefuseCalls()
		log.Info("draining: new calls refused; batch job results held in memory are served until read or deleted",
			"jobs", n)
		if batches.AwaitRead(ctx) == nil {
			log.Info("the results of every batch job held in memory were read or deleted")
		}
	}
	batchesDone := make(chan struct{})
	go func() { _ = batches.Shutdown(ctx); close(batchesDone) }()
	if err := p.Shutdown(ctx); err != nil {
		log.Warn("drain timed out: calls still waiting got a draining error", "err", err)
	} else {
		log.Info("drained")
	}
	<-batchesDone
}

func serveListener(name string, serve func(net.Listener) error, ln net.Listener) error {
	if err := serve(ln); err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	return nil
}

// warnConnBound says at start-up when a lane's limit can exceed the
// connections to its upstream, which then bound its calls in flight.
func warnConnBound(log *slog.Logger, cfg *parsed) {
	if cfg.MaxConcurrency > cfg.MaxConnsPerUp {
		log.Warn("GOVERNOR_MAX_CONCURRENCY is above GOVERNOR_MAX_CONNS_PER_UPSTREAM: a lane's calls beyond the connections to its upstream wait for one (conn_limited in /governor/lanes)",
			"max_concurrency", cfg.MaxConcurrency, "max_conns_per_upstream", cfg.MaxConnsPerUp)
	}
}

// proxyRetries maps GOVERNOR_MAX_RETRIES to proxy.Config.MaxRetries, whose
// zero value means the default: there, no retries is negative.
func proxyRetries(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
