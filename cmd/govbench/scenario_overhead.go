package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Overhead: what a call pays for going through a proxy, against a provider
// that answers at once. The same load goes direct to mockllm, through
// Governor, through nginx and through the fasthttp floor (floorproxy.go),
// back to back within each round and in a rotating order, so that a noisy
// neighbour on the machine hits them alike. CPU time and memory are those
// of the proxy process (nginx: its master and workers); the load generator
// and mockllm run on the same cores for all of them.

// Targets of the overhead scenario.
const (
	targetDirect   = "direct"
	targetGovernor = "governor"
	targetNginx    = "nginx"
)

// overheadModes are the answer kinds measured: a JSON body, and an SSE
// stream of mockllm's default 8 content chunks.
var overheadModes = []string{"json", "sse"}

// overheadTarget is a base URL to load and the process that serves it.
type overheadTarget struct {
	name string
	url  string
	pid  int // the proxy process; 0 for direct (no proxy to measure)
}

// overheadCell accumulates one target at one concurrency and mode over
// the rounds.
type overheadCell struct {
	calls   int
	errors  int
	elapsed time.Duration
	cpu     time.Duration
	hwm     int64
	lat     []time.Duration
	ttfb    []time.Duration
}

func (c *overheadCell) rps() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.calls) / c.elapsed.Seconds()
}

func (c *overheadCell) cpuPerCall() time.Duration {
	if c.calls == 0 {
		return 0
	}
	return c.cpu / time.Duration(c.calls)
}

// overheadKey identifies a cell.
type overheadKey struct {
	mode    string
	clients int
	target  string
}

// overheadResult holds every cell; targets lists the targets measured.
type overheadResult struct {
	targets []string
	cells   map[overheadKey]*overheadCell
	// otherCPU is the share of the machine's CPU that other processes
	// used during the measurements (see noiseMeter).
	otherCPU float64
}

// runOverhead measures every target at every concurrency level and mode.
func runOverhead(ctx context.Context, w *workspace, o *options, log io.Writer) (res *overheadResult, err error) {
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	m, err := startMock(ctx, w, "overhead-mockllm", mockConfig{seed: o.seed})
	if err != nil {
		return nil, err
	}
	g.add(m.Process)
	gov, err := startGovernor(ctx, w, "overhead-governor", m.url, o.governorEnv...)
	if err != nil {
		return nil, err
	}
	g.add(gov.Process)
	pids := []int{m.PID(), gov.PID()}
	targets := []overheadTarget{
		{name: targetDirect, url: m.url},
		{name: targetGovernor, url: gov.url, pid: gov.PID()},
	}
	if w.nginxBin != "" {
		ng, err := startNginx(ctx, w, m.url)
		if err != nil {
			return nil, err
		}
		g.add(ng.Process)
		targets = append(targets, overheadTarget{name: targetNginx, url: ng.url, pid: ng.PID()})
		pids = append(pids, ng.PID())
	}
	fl, err := startFloorProxy(ctx, w, m.url)
	if err != nil {
		return nil, err
	}
	g.add(fl.Process)
	targets = append(targets, overheadTarget{name: targetFasthttp, url: fl.url, pid: fl.PID()})
	pids = append(pids, fl.PID())
	noise, err := startNoise(pids...)
	if err != nil {
		return nil, err
	}

	res = &overheadResult{cells: map[overheadKey]*overheadCell{}}
	for _, t := range targets {
		res.targets = append(res.targets, t.name)
	}
	for round := range o.overheadRounds {
		for _, mode := range overheadModes {
			for _, c := range o.concurrency {
				fmt.Fprintf(log, "govbench: overhead round %d/%d, %s, %d clients\n", round+1, o.overheadRounds, mode, c)
				for k := range targets {
					t := targets[(k+round)%len(targets)]
					key := overheadKey{mode: mode, clients: c, target: t.name}
					if res.cells[key] == nil {
						res.cells[key] = &overheadCell{}
					}
					if err := measureOverhead(ctx, o, t, mode, c, res.cells[key]); err != nil {
						return nil, fmt.Errorf("overhead %s, %s, %d clients: %w", t.name, mode, c, err)
					}
					if err := g.alive(); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if res.otherCPU, err = noise.otherShare(); err != nil {
		return nil, err
	}
	return res, nil
}

// measureOverhead warms up, then loads t for the measured duration and adds
// what it saw to cell.
func measureOverhead(ctx context.Context, o *options, t overheadTarget, mode string, clients int, cell *overheadCell) error {
	lc := newLoadClient(clients)
	defer lc.close()
	rq := request{url: t.url + "/v1/chat/completions", body: chatBody(mode == "sse")}
	call := func(t0 time.Time) func(context.Context, int, []byte) callResult {
		return func(ctx context.Context, _ int, buf []byte) callResult { return lc.call(ctx, t0, rq, buf) }
	}
	t0 := time.Now()
	runUntil(ctx, clients, t0, o.overheadWarmup, call(t0))
	var before usage
	if t.pid != 0 {
		var err error
		if before, err = readUsage(t.pid); err != nil {
			return err
		}
	}
	t1 := time.Now()
	results := runUntil(ctx, clients, t1, o.overheadDuration, call(t1))
	elapsed := time.Since(t1)
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.pid != 0 {
		after, err := readUsage(t.pid)
		if err != nil {
			return err
		}
		cell.cpu += after.CPU - before.CPU
		cell.hwm = max(cell.hwm, after.HWM)
	}
	cell.elapsed += elapsed
	for _, r := range results {
		cell.calls++
		if !r.ok() {
			cell.errors++
			continue
		}
		cell.lat = append(cell.lat, r.latency())
		cell.ttfb = append(cell.ttfb, r.ttfb())
	}
	return nil
}
