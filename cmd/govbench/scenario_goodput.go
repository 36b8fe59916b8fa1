package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"
)

// Goodput scenarios S1–S3: goodputClients closed-loop clients push a fixed
// number of calls through one Governor into a provider that limits them.
// Each scenario is sized so that its optimum makespan is -goodput-duration:
// the provider's median latency L follows from it.

// goodputClients is the number of closed-loop clients of S1–S3.
const goodputClients = 64

// latencySpread is mockllm's lognormal sigma in every goodput scenario.
const latencySpread = 0.2

// goodputSpec is one of S1–S3, sized by the options.
type goodputSpec struct {
	name    string // s1, s2, s3
	title   string
	calls   int
	mock    mockConfig
	optimum time.Duration
	// changes are the capacities the lane limit should converge on; nil
	// when convergence does not apply (a token bucket sets a rate, which
	// Governor meets by pacing, not by its concurrency limit).
	changes []capChange
	// clients is the number of closed-loop clients; 0 means
	// goodputClients.
	clients int
	// path and body, if set, give call i's path and body (default: a
	// small chat completion).
	path func(i int) string
	body func(i int) []byte
	// env is more settings for the Governor, before -governor-env's.
	env []string
}

// goodputLatency is the median provider latency of the goodput scenarios:
// S1's optimum, ⌈calls/16⌉ rounds, spans -goodput-duration.
func goodputLatency(o *options) time.Duration {
	return o.goodputDuration / time.Duration((o.calls+15)/16)
}

// goodputSpecs returns S1, S2 and S3 sized by o.
func goodputSpecs(o *options) map[string]goodputSpec {
	d, n := o.goodputDuration, o.calls
	l := goodputLatency(o)
	base := mockConfig{latency: l, spread: latencySpread, seed: o.seed}

	s1 := goodputSpec{name: "s1", title: "S1 cap 16", calls: n, mock: base}
	s1.mock.maxConcurrency = 16
	s1.optimum = optimumCap(n, 16, l)
	s1.changes = []capChange{{at: 0, capacity: 16, label: "start"}}

	// S2: a bucket that holds one second of its rate (mockllm's default
	// burst), at the rate that makes the optimum (n−b)/r + L equal to d:
	// with b = r, r = n/(d − L + 1s).
	r := float64(n) / (d - l + time.Second).Seconds()
	b := max(1, int(math.Round(r)))
	s2 := goodputSpec{name: "s2", title: fmt.Sprintf("S2 bucket %.1f/s burst %d", r, b), calls: n, mock: base}
	s2.mock.rate, s2.mock.burst = r, b
	s2.optimum = optimumBucket(n, b, r, l)

	// S3: 32 → 8 → 32 at d/3 and 2d/3, with the calls that fill exactly
	// d at the optimum: (d/3)·(32+8+32)/L = 24·d/L.
	phases := []capPhase{{0, 32}, {d / 3, 8}, {2 * d / 3, 32}}
	n3 := int(24 * d / l)
	s3 := goodputSpec{name: "s3", title: "S3 cap 32→8→32", calls: n3, mock: base}
	s3.mock.maxConcurrency = 32
	s3.mock.schedule = fmt.Sprintf("%v:cap=8,%v:cap=32", phases[1].at, phases[2].at)
	s3.optimum = optimumSchedule(n3, l, phases)
	s3.changes = []capChange{
		{at: 0, capacity: 32, label: "start"},
		{at: phases[1].at, capacity: 8, label: "→8"},
		{at: phases[2].at, capacity: 32, label: "→32"},
	}
	return map[string]goodputSpec{"s1": s1, "s2": s2, "s3": s3}
}

// request is call i of the scenario, to the server at base.
func (s goodputSpec) request(base string, i int) request {
	rq := request{url: base + "/v1/chat/completions", body: chatBody(false)}
	if s.path != nil {
		rq.url = base + s.path(i)
	}
	if s.body != nil {
		rq.body = s.body(i)
	}
	return rq
}

// goodputRun is the outcome of one scenario with one preset.
type goodputRun struct {
	scenario string
	title    string
	preset   string
	coord    coordination // S4 only
	latency  time.Duration
	optimum  time.Duration
	makespan time.Duration
	cutOff   bool // the run hit its time limit: makespan is a lower bound
	tally    tally
	events   laneEvents
	conv     []convergence
	phases   []phaseUse // nil without capacity phases (S2)
	s4       *sharedRun // S4 only
}

// label is the preset, with the coordination if any: "default + redis".
func (r goodputRun) label() string { return r.preset + r.coord.suffix() }

// goodput is optimum / makespan: 1 is the best a governor can do.
func (r goodputRun) goodput() float64 {
	if r.s4 != nil {
		return r.s4.aggregate()
	}
	if r.makespan <= 0 {
		return 0
	}
	return float64(r.optimum) / float64(r.makespan)
}

// convergenceHold is how long the limit must stay in band to count as
// converged: five round trips.
func convergenceHold(l time.Duration) time.Duration { return 5 * l }

// sampleEvery is the polling interval of GET /governor/lanes.
func sampleEvery(l time.Duration) time.Duration {
	return min(100*time.Millisecond, max(l/5, 10*time.Millisecond))
}

// runLimit is the time after which a goodput run is cut off.
func runLimit(o *options, optimum time.Duration) time.Duration {
	return time.Duration(o.timeoutFactor*float64(optimum)) + 10*time.Second
}

// runGoodput runs spec once with the AIMD preset.
func runGoodput(ctx context.Context, w *workspace, o *options, spec goodputSpec, preset string, log io.Writer) (run goodputRun, err error) {
	l := spec.mock.latency
	fmt.Fprintf(log, "govbench: %s, preset %s: %d calls, latency %v, optimum %v\n", spec.title, preset, spec.calls, l, spec.optimum.Round(time.Millisecond))
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	m, err := startMock(ctx, w, spec.name+"-"+preset+"-mockllm", spec.mock)
	if err != nil {
		return run, err
	}
	g.add(m.Process)
	env := append(append([]string{"GOVERNOR_AIMD_PRESET=" + preset}, spec.env...), o.governorEnv...)
	gov, err := startGovernor(ctx, w, spec.name+"-"+preset+"-governor", m.url, env...)
	if err != nil {
		return run, err
	}
	g.add(gov.Process)

	clients := spec.clients
	if clients == 0 {
		clients = goodputClients
	}
	lc := newLoadClient(clients)
	defer lc.close()
	if err := m.reset(ctx); err != nil { // the schedule starts now
		return run, err
	}
	t0 := time.Now()
	smp := startSampler(ctx, 1, t0, sampleEvery(l))
	smp.set(0, gov)
	rctx, cancel := context.WithTimeout(ctx, runLimit(o, spec.optimum))
	results := runCalls(rctx, clients, spec.calls, func(ctx context.Context, i int, buf []byte) callResult {
		rq := spec.request(gov.url, i)
		rq.id = fmt.Sprintf("%s-%s-%06d", spec.name, preset, i)
		return lc.call(ctx, t0, rq, buf)
	})
	cutOff := rctx.Err() != nil
	cancel()
	samples := smp.stop()
	if err := ctx.Err(); err != nil {
		return run, err
	}
	if err := writeSamples(filepath.Join(w.dir, spec.name+"-"+preset+"-lanes.csv"), samples); err != nil {
		return run, err
	}
	if err := g.alive(); err != nil {
		return run, fmt.Errorf("%s, preset %s: %w", spec.title, preset, err)
	}
	st, err := m.stats(ctx)
	if err != nil {
		return run, err
	}
	ev, err := gov.events(ctx)
	if err != nil {
		return run, err
	}
	run = goodputRun{
		scenario: spec.name, title: spec.title, preset: preset,
		latency: l, optimum: spec.optimum, cutOff: cutOff,
		tally: tallyCalls(results, st), events: ev,
	}
	for _, r := range results {
		if r.Sent {
			run.makespan = max(run.makespan, r.End)
		}
	}
	if cutOff {
		run.makespan = max(run.makespan, runLimit(o, spec.optimum))
	}
	run.conv = convergences(samples, spec.changes, run.makespan, convergenceHold(l), func(s laneSample) float64 {
		return float64(s.limits[0])
	})
	if len(spec.changes) > 0 {
		run.phases = phaseUses(samples, spec.changes, run.makespan, func(s laneSample) float64 {
			return float64(s.inFlight[0])
		})
	}
	return run, nil
}
