package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// logOut receives progress lines.
var logOut io.Writer = os.Stderr

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout))
}

// options are govsoak's flags.
type options struct {
	duration    time.Duration
	sample      time.Duration
	smoke       bool
	chat        int
	streams     int
	anthropic   int
	batchSize   int
	asyncSize   int
	out         string
	keep        bool
	seed        uint64
	commandLine string
}

func parseOptions(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("govsoak", flag.ContinueOnError)
	fs.SetOutput(logOut)
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "how long to drive traffic")
	fs.DurationVar(&o.sample, "sample", 30*time.Second, "interval between samples of Governor's memory and goroutines")
	fs.BoolVar(&o.smoke, "smoke", false, "a short run for CI: 20s of traffic from fewer workers, a sample every 2s (explicit -duration and -sample win)")
	fs.IntVar(&o.chat, "chat", 24, "workers sending chat completions (JSON)")
	fs.IntVar(&o.streams, "streams", 6, "workers sending streamed chat completions")
	fs.IntVar(&o.anthropic, "anthropic", 4, "workers sending Anthropic messages, half of them streamed")
	fs.IntVar(&o.batchSize, "batch", 20, "items per sync batch (one worker)")
	fs.IntVar(&o.asyncSize, "async", 40, "items per async batch job (one worker)")
	fs.StringVar(&o.out, "out", "", "also write the report to this `file`")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (binaries and process logs)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the traffic and of the provider's faults")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.smoke {
		defaults := map[string]func(){
			"duration": func() { o.duration = 20 * time.Second },
			"sample":   func() { o.sample = 2 * time.Second },
			"chat":     func() { o.chat = 8 },
			"streams":  func() { o.streams = 2 },
			"anthropic": func() {
				o.anthropic = 2
			},
			"batch": func() { o.batchSize = 10 },
			"async": func() { o.asyncSize = 10 },
		}
		for name, apply := range defaults {
			if !set[name] {
				apply()
			}
		}
	}
	if o.duration <= 0 || o.sample <= 0 || o.chat < 0 || o.streams < 0 || o.anthropic < 0 || o.batchSize < 1 || o.asyncSize < 1 {
		return nil, errors.New("durations must be positive, worker counts not negative, batch sizes at least 1")
	}
	o.commandLine = strings.TrimSpace("go run ./cmd/govsoak " + strings.Join(args, " "))
	return o, nil
}

// The provider's behaviour and Governor's settings for a soak: a
// concurrency cap below what the traffic asks for (429 with Retry-After),
// random 529s, 500s and connection resets, and timeouts short enough that
// a hang costs seconds, not minutes.
func mockArgs(seed uint64) []string {
	return []string{"-latency", "150ms", "-spread", "0.3", "-chunk-delay", "15ms", "-chunks", "12",
		"-max-concurrency", "40", "-fault-529", "0.02", "-fault-500", "0.01", "-fault-reset", "0.02",
		"-seed", fmt.Sprint(seed)}
}

var governorEnv = []string{"GOVERNOR_MAX_CONCURRENCY=32", "GOVERNOR_ATTEMPT_TIMEOUT=3s", "GOVERNOR_BACKOFF_MAX=5s",
	"GOVERNOR_MAX_PAUSE=5s", "GOVERNOR_LOG_LEVEL=warn",
	"GODEBUG=gctrace=1"} // the live heap after each GC, read from the log

func run(ctx context.Context, args []string, stdout io.Writer) int {
	o, err := parseOptions(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(logOut, "govsoak: %v\n", err)
		return 2
	}
	mach := describeMachine()
	if len(mach.others) > 0 {
		fmt.Fprintf(logOut, "govsoak: warning: other load is running, the figures will show it: %s\n", strings.Join(mach.others, "; "))
	}
	dir, err := os.MkdirTemp("", "govsoak-")
	if err != nil {
		fmt.Fprintf(logOut, "govsoak: %v\n", err)
		return 1
	}
	if o.keep {
		fmt.Fprintf(logOut, "govsoak: work directory %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(logOut, "govsoak: building governor and mockllm\n")
	govBin, mockBin, err := buildBinaries(ctx, dir)
	if err != nil {
		fmt.Fprintf(logOut, "govsoak: %v\n", err)
		return 1
	}
	margs := mockArgs(o.seed)
	sys, err := startSystem(ctx, dir, govBin, mockBin, margs, governorEnv)
	if err != nil {
		fmt.Fprintf(logOut, "govsoak: %v\n", err)
		return 1
	}
	info := runInfo{command: o.commandLine, duration: o.duration, machine: mach, mockArgs: margs, govEnv: governorEnv,
		traffic: fmt.Sprintf("%d chat workers (JSON), %d streaming, %d Anthropic (half streamed), one sync batch worker (%d items, JSON or NDJSON), one async job worker (%d items); %.0f%% of calls and items carry a forced fault sequence",
			o.chat, o.streams, o.anthropic, o.batchSize, o.asyncSize, 100*forcedFaultShare)}
	res := soak(ctx, o, sys, &info)
	info.govExit = sys.gov.Stop(60 * time.Second)
	_ = sys.mock.Stop(20 * time.Second)
	info.machine.loadEnd = loadAverage()

	var report strings.Builder
	writeReport(&report, info, res.tally, res.provider, res.samples)
	fmt.Fprint(stdout, report.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(report.String()), 0o644); err != nil {
			fmt.Fprintf(logOut, "govsoak: %v\n", err)
			return 1
		}
	}
	if res.tally.lost > 0 || res.tally.duplicated > 0 || info.unfinished > 0 || info.govExit != nil || info.processErr != nil {
		return 1
	}
	return 0
}

type result struct {
	tally    tally
	provider providerStats
	samples  []sample
}

// soak drives the traffic and samples Governor, then checks the calls
// against what the provider saw.
func soak(ctx context.Context, o *options, sys *system, info *runInfo) result {
	var l ledger
	prov := newProvider(sys.mockURL)
	smp := newSampler(sys.gov.PID(), sys.gov.LogPath(), sys.admin, &l)
	var samples []sample
	record := func(s sample) {
		samples = append(samples, s)
		fmt.Fprintf(logOut, "govsoak: %6v %-6s rss %6s MiB  goroutines %5d  in flight %4d  queued %4d  calls %7d  %5.0f/s  healthz %v\n",
			s.at.Round(time.Second), s.phase, mib(s.rssKiB), s.goroutines, s.inFlight, s.queued, s.calls, s.perSecond, s.healthz.Round(10*time.Microsecond))
	}
	record(smp.take(ctx, "before"))

	pollEvery := min(o.sample, 10*time.Second)
	pollCtx, stopPoll := context.WithCancel(context.Background())
	pollErrs := make(chan error, 1)
	pollDone := make(chan struct{})
	go func() { prov.run(pollCtx, pollEvery, pollErrs); close(pollDone) }()

	workers := o.chat + o.streams + o.anthropic + 2
	d := newDriver(sys.base, workers, &l)
	traffic, stopTraffic := context.WithCancel(ctx)
	seed := o.seed * 1000
	next := func() uint64 { seed++; return seed }
	for range o.chat {
		d.work(traffic, next(), func(rng *rand.Rand) { d.chat(rng, false) })
	}
	for range o.streams {
		d.work(traffic, next(), func(rng *rand.Rand) { d.chat(rng, true) })
	}
	for i := range o.anthropic {
		d.work(traffic, next(), func(rng *rand.Rand) { d.anthropic(rng, i%2 == 1) })
	}
	d.work(traffic, next(), func(rng *rand.Rand) { d.syncBatch(rng, o.batchSize) })
	d.work(traffic, next(), func(rng *rand.Rand) { d.asyncBatch(rng, o.asyncSize) })
	smp.start = time.Now()
	smp.last.at = 0

	tick := time.NewTicker(o.sample)
	end := time.NewTimer(o.duration)
	alive := time.NewTicker(time.Second)
loop:
	for {
		select {
		case <-tick.C:
			record(smp.take(ctx, "load"))
			info.machine.noteOthers()
		case <-alive.C:
			if err := sys.alive(); err != nil {
				info.processErr = err
				break loop
			}
		case err := <-pollErrs:
			fmt.Fprintf(logOut, "govsoak: %v\n", err)
		case <-end.C:
			break loop
		case <-ctx.Done():
			fmt.Fprintf(logOut, "govsoak: interrupted: finishing the calls under way\n")
			info.duration = time.Since(smp.start).Round(time.Second)
			break loop
		}
	}
	tick.Stop()
	alive.Stop()
	end.Stop()
	stopTraffic()
	fmt.Fprintf(logOut, "govsoak: traffic stopped; waiting for the calls under way\n")
	if !d.wait(3 * time.Minute) {
		fmt.Fprintf(logOut, "govsoak: calls still under way after 3 minutes\n")
	}
	info.unfinished = d.started.Load() - int64(l.len())
	d.hc.CloseIdleConnections()
	stopPoll()
	<-pollDone
	if err := prov.poll(context.Background()); err != nil {
		fmt.Fprintf(logOut, "govsoak: %v\n", err)
	}

	// Idle again. Governor closes idle upstream connections after 60s
	// (fasthttp retires idle workers after 10s): past that, the process
	// holds what it holds at rest.
	settle := 65 * time.Second
	if o.smoke {
		settle = 3 * time.Second
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
	}
	record(smp.take(context.Background(), "after"))

	seen, last := prov.counts()
	return result{tally: l.check(seen), provider: last, samples: samples}
}
