package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"
)

// Convergence: after the capacity changes, how long until the lane limit
// Governor sets (GET /governor/lanes) is within 10% (at least ±1) of the
// new capacity and stays there for a hold of several round trips. The
// limit, not the provider's in-flight count, is the controller's decision:
// a limit above the capacity is 429s, one below it is capacity left unused.

// laneSample is the lane limit, calls in flight and calls among them held
// for the provider's budget of each governor of a run at one instant; -1
// for a governor that is not running or did not answer.
type laneSample struct {
	at       time.Duration
	limits   []int
	inFlight []int
	held     []int
}

// sampler polls GET /governor/lanes of its governors from one goroutine.
type sampler struct {
	mu      sync.Mutex
	govs    []*governor // by slot; nil until set
	samples []laneSample

	cancel context.CancelFunc
	done   chan struct{}
}

// startSampler polls the governors set in its slots (n of them) every
// interval, timing samples from t0, until stop.
func startSampler(ctx context.Context, n int, t0 time.Time, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{govs: make([]*governor, n), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			s.poll(ctx, t0)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// set makes slot i poll g; nil stops polling it.
func (s *sampler) set(i int, g *governor) {
	s.mu.Lock()
	s.govs[i] = g
	s.mu.Unlock()
}

func (s *sampler) poll(ctx context.Context, t0 time.Time) {
	s.mu.Lock()
	govs := append([]*governor(nil), s.govs...)
	s.mu.Unlock()
	smp := laneSample{at: time.Since(t0), limits: make([]int, len(govs)), inFlight: make([]int, len(govs)),
		held: make([]int, len(govs))}
	for i, g := range govs {
		smp.limits[i], smp.inFlight[i], smp.held[i] = -1, -1, -1
		if g == nil {
			continue
		}
		if li, err := g.lanes(ctx); err == nil {
			smp.limits[i], smp.inFlight[i], smp.held[i] = li.Limit, li.InFlight, li.Held
		}
	}
	if ctx.Err() != nil {
		return // stop cut this poll short: its -1s are not the lanes' state
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends the polling and returns the samples.
func (s *sampler) stop() []laneSample {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// band is the range of limits that counts as converged on capacity c:
// within 10%, and at least ±1.
func band(c float64) (lo, hi float64) {
	tol := math.Max(1, 0.1*c)
	return c - tol, c + tol
}

// converge returns how long after from the series (at[i], v[i]) enters
// [lo, hi] and then stays in it for hold, considering samples up to until;
// ok is false if it does not.
func converge(at []time.Duration, v []float64, from, until time.Duration, lo, hi float64, hold time.Duration) (d time.Duration, ok bool) {
	enter := time.Duration(-1)
	for i := range at {
		if at[i] < from {
			continue
		}
		if at[i] > until {
			break
		}
		if v[i] < lo || v[i] > hi {
			enter = -1
			continue
		}
		if enter < 0 {
			enter = at[i]
		}
		if at[i]-enter >= hold {
			return enter - from, true
		}
	}
	return 0, false
}

// capChange is a change of the capacity a governor (or the governors of a
// run together) should converge on.
type capChange struct {
	at       time.Duration
	capacity float64
	label    string // e.g. "→8"
}

// convergence is the outcome for one capChange.
type convergence struct {
	change capChange
	after  time.Duration
	ok     bool
}

// convergences measures each change, up to the next change or until end,
// on the series value(sample).
func convergences(samples []laneSample, changes []capChange, end, hold time.Duration, value func(laneSample) float64) []convergence {
	at := make([]time.Duration, len(samples))
	v := make([]float64, len(samples))
	for i, s := range samples {
		at[i], v[i] = s.at, value(s)
	}
	out := make([]convergence, len(changes))
	for i, ch := range changes {
		until := end
		if i+1 < len(changes) {
			until = changes[i+1].at
		}
		lo, hi := band(ch.capacity)
		d, ok := converge(at, v, ch.at, until, lo, hi, hold)
		out[i] = convergence{change: ch, after: d, ok: ok}
	}
	return out
}

// writeSamples writes samples as CSV to path: the time in milliseconds,
// then each polled Governor's limit, calls in flight and calls among them
// held for the provider's budget (-1 while not polled). govbench writes one file per goodput run into its work
// directory, which -keep keeps: a run's timeline, for plotting.
func writeSamples(path string, samples []laneSample) error {
	var b strings.Builder
	b.WriteString("ms")
	if len(samples) > 0 {
		for i := range samples[0].limits {
			fmt.Fprintf(&b, ",limit%d,inflight%d,held%d", i+1, i+1, i+1)
		}
	}
	b.WriteByte('\n')
	for _, s := range samples {
		fmt.Fprintf(&b, "%d", s.at.Milliseconds())
		for i := range s.limits {
			held := -1
			if i < len(s.held) {
				held = s.held[i]
			}
			fmt.Fprintf(&b, ",%d,%d,%d", s.limits[i], s.inFlight[i], held)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("samples: %w", err)
	}
	return nil
}
