package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// S4: sharedProcs Governor processes, each with its own sharedClients
// closed-loop clients, share one provider capped at sharedCap. Without
// coordination nothing connects the processes: each must find its share
// from its own 429s. With coordination they share the lane over a Redis
// that govbench starts (GOVERNOR_REDIS_URL); one variant kills that Redis
// while all four run and restarts it empty, to show that no call depends on
// it.
//
// Process i starts at i·d/10 and its clients stop at 0.7·d + i·d/10 (then
// the process is stopped), so one, two, three and four run in turn, all
// four from 0.3·d to 0.7·d, and then three, two, one. With 16 clients each,
// one process alone cannot fill the cap and two fill it exactly: from three
// on the processes compete.
const (
	sharedProcs   = 4
	sharedClients = 16
	sharedCap     = 32
)

// coordination is how S4's Governors share what they learn.
type coordination int

const (
	coordNone        coordination = iota // each on its own
	coordRedis                           // GOVERNOR_REDIS_URL
	coordRedisKilled                     // the same; Redis killed mid-run
)

// suffix labels a row of the report: "default + redis".
func (c coordination) suffix() string {
	switch c {
	case coordRedis:
		return " + redis"
	case coordRedisKilled:
		return " + redis, killed"
	}
	return ""
}

// redisOutage is when, in coordRedisKilled, Redis is down: from 0.45·d to
// 0.55·d, inside the window where all four processes run.
func redisOutage(d time.Duration) [2]time.Duration {
	return [2]time.Duration{45 * d / 100, 55 * d / 100}
}

// sharedRun is the part of an S4 outcome the goodput table does not hold.
type sharedRun struct {
	window    [2]time.Duration // the contended window of the aggregate
	completed int              // calls answered 2xx in window
	optimum   float64          // calls the cap allows in window: 32·len/L
	all4      [2]time.Duration // all four run
	perProc   [sharedProcs]int // calls answered 2xx in all4, per process
	calls     [sharedProcs]int // calls sent, per process
}

// aggregate is the calls completed while the provider's capacity was the
// bound over the calls it allows then.
func (s *sharedRun) aggregate() float64 {
	if s.optimum <= 0 {
		return 0
	}
	return float64(s.completed) / s.optimum
}

// throughput is process i's rate of 2xx answers while all four run.
func (s *sharedRun) throughput(i int) float64 {
	return float64(s.perProc[i]) / (s.all4[1] - s.all4[0]).Seconds()
}

// fairness is Jain's index over the processes' throughput while all four
// run.
func (s *sharedRun) fairness() float64 {
	x := make([]float64, sharedProcs)
	for i := range x {
		x[i] = s.throughput(i)
	}
	return jain(x)
}

// sharedSpans returns when each process runs: [start, stop) offsets.
func sharedSpans(d time.Duration) [sharedProcs][2]time.Duration {
	var s [sharedProcs][2]time.Duration
	for i := range s {
		s[i] = [2]time.Duration{time.Duration(i) * d / 10, 7*d/10 + time.Duration(i)*d/10}
	}
	return s
}

// sharedChanges are the moments the equilibrium changes (a process starts
// or stops) with the aggregate limit to converge on: min(cap, 16·running).
func sharedChanges(spans [sharedProcs][2]time.Duration) []capChange {
	var ch []capChange
	running := 0
	for i := range spans {
		running++
		ch = append(ch, capChange{at: spans[i][0], capacity: float64(min(sharedCap, sharedClients*running)), label: fmt.Sprintf("+%d", i+1)})
	}
	for i := range spans[:sharedProcs-1] {
		running--
		ch = append(ch, capChange{at: spans[i][1], capacity: float64(min(sharedCap, sharedClients*running)), label: fmt.Sprintf("−%d", i+1)})
	}
	return ch
}

// runShared runs S4 with the AIMD preset and the coordination given.
func runShared(ctx context.Context, w *workspace, o *options, preset string, coord coordination, log io.Writer) (run goodputRun, err error) {
	d, l := o.goodputDuration, sharedLatency(o)
	spans := sharedSpans(d)
	title := fmt.Sprintf("S4 %d processes, cap %d", sharedProcs, sharedCap)
	name := "s4-" + preset + strings.ReplaceAll(strings.ReplaceAll(coord.suffix(), " + ", "-"), ", ", "-")
	fmt.Fprintf(log, "govbench: %s, preset %s%s: %d clients each, latency %v, %v\n", title, preset, coord.suffix(), sharedClients, l, d)
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	m, err := startMock(ctx, w, name+"-mockllm", mockConfig{latency: l, spread: latencySpread, seed: o.seed, maxConcurrency: sharedCap})
	if err != nil {
		return run, err
	}
	g.add(m.Process)
	env := append([]string{"GOVERNOR_AIMD_PRESET=" + preset}, o.governorEnv...)
	var rs *redisServer
	if coord != coordNone {
		if rs, err = startRedis(ctx, w, name+"-redis", ""); err != nil {
			return run, err
		}
		g.add(rs.Process)
		env = append(env, "GOVERNOR_REDIS_URL="+rs.url())
	}

	if err := m.reset(ctx); err != nil {
		return run, err
	}
	t0 := time.Now()
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	smp := startSampler(rctx, sharedProcs, t0, sampleEvery(l))
	var (
		wg      sync.WaitGroup
		govs    [sharedProcs]*governor
		results [sharedProcs][]callResult
		events  [sharedProcs]laneEvents
	)
	defer func() { // a process whose goroutine failed to stop it
		for _, gv := range govs {
			if gv != nil {
				_ = gv.Stop(stopTimeout)
			}
		}
	}()
	body := chatBody(false)
	for i := range sharedProcs {
		wg.Go(func() {
			if !sleepUntil(rctx, t0.Add(spans[i][0])) {
				return
			}
			gov, err := startGovernor(rctx, w, fmt.Sprintf("%s-governor%d", name, i+1), m.url, append(env, fmt.Sprintf("GOVERNOR_INSTANCE=%s-p%d", name, i+1))...)
			if err != nil {
				cancel(err)
				return
			}
			govs[i] = gov
			smp.set(i, gov)
			lc := newLoadClient(sharedClients)
			results[i] = runUntil(rctx, sharedClients, t0, spans[i][1], func(ctx context.Context, n int, buf []byte) callResult {
				id := fmt.Sprintf("%s-p%d-%06d", name, i+1, n)
				return lc.call(ctx, t0, request{url: gov.url + "/v1/chat/completions", body: body, id: id}, buf)
			})
			lc.close()
			smp.set(i, nil)
			if err := gov.Alive(); err != nil {
				cancel(err)
				return
			}
			ev, err := gov.events(rctx)
			if err != nil {
				cancel(err)
				return
			}
			events[i] = ev
			if err := gov.Stop(stopTimeout); err != nil {
				cancel(err)
			}
		})
	}
	if coord == coordRedisKilled {
		wg.Go(func() {
			out := redisOutage(d)
			if !sleepUntil(rctx, t0.Add(out[0])) {
				return
			}
			rs.Kill()
			fmt.Fprintf(log, "govbench: %s: redis killed at %v\n", title, time.Since(t0).Round(time.Millisecond))
			if !sleepUntil(rctx, t0.Add(out[1])) {
				return
			}
			again, err := startRedis(rctx, w, name+"-redis-restarted", rs.addr)
			if err != nil {
				cancel(err)
				return
			}
			g.add(again.Process) // stopped by the deferred stopAll
			fmt.Fprintf(log, "govbench: %s: redis restarted at %v\n", title, time.Since(t0).Round(time.Millisecond))
		})
	}
	wg.Wait()
	samples := smp.stop()
	if err := context.Cause(rctx); err != nil {
		return run, err
	}
	if err := writeSamples(filepath.Join(w.dir, name+"-lanes.csv"), samples); err != nil {
		return run, err
	}
	if err := g.alive(); err != nil {
		return run, err
	}
	st, err := m.stats(ctx)
	if err != nil {
		return run, err
	}

	var all []callResult
	for _, rs := range results {
		all = append(all, rs...)
	}
	s := newSharedRun(results, spans, l)
	run = goodputRun{scenario: "s4", title: title, preset: preset, coord: coord, latency: l, tally: tallyCalls(all, st), s4: s}
	for _, ev := range events {
		run.events = run.events.add(ev)
	}
	for _, r := range all {
		run.makespan = max(run.makespan, r.End)
	}
	running := func(i int, t time.Duration) bool { return t >= spans[i][0] && t < spans[i][1] }
	changes := sharedChanges(spans)
	// Convergence: the limits of the processes running, each counted up
	// to what its clients can use.
	run.conv = convergences(samples, changes, d, convergenceHold(l), func(smp laneSample) float64 {
		sum := 0
		for i, lim := range smp.limits {
			if running(i, smp.at) {
				sum += min(max(lim, 0), sharedClients)
			}
		}
		return float64(sum)
	})
	// Use: every call in flight at the provider, those of a process whose
	// clients stopped and whose last calls are still running included.
	run.phases = phaseUses(samples, changes, d, func(smp laneSample) float64 {
		sum := 0
		for _, n := range smp.inFlight {
			sum += max(n, 0)
		}
		return float64(sum)
	})
	return run, nil
}

// newSharedRun counts the calls of each process of S4 in the contended
// window and in the time all four run, from the processes' spans and the
// provider's median latency l.
func newSharedRun(results [sharedProcs][]callResult, spans [sharedProcs][2]time.Duration, l time.Duration) *sharedRun {
	s := &sharedRun{}
	s.window = [2]time.Duration{spans[1][0] + l, spans[sharedProcs-2][1]}
	s.optimum = sharedCap * (s.window[1] - s.window[0]).Seconds() / l.Seconds()
	s.all4 = [2]time.Duration{spans[sharedProcs-1][0], spans[0][1]}
	for i, rs := range results {
		s.calls[i] = len(rs)
		for _, r := range rs {
			if !r.ok() {
				continue
			}
			if r.End >= s.window[0] && r.End < s.window[1] {
				s.completed++
			}
			if r.End >= s.all4[0] && r.End < s.all4[1] {
				s.perProc[i]++
			}
		}
	}
	return s
}

// sharedLatency is S4's median provider latency: -s4-latency, or else the
// other goodput scenarios'.
func sharedLatency(o *options) time.Duration {
	if o.s4Latency > 0 {
		return o.s4Latency
	}
	return goodputLatency(o)
}

// sleepUntil waits until t; it reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
