package aimd

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A deterministic discrete-event simulation of one governed lane: no real
// time (a simulated clock), a seeded random source.
//
//   - Clients closed-loop clients each keep one call outstanding until
//     Calls calls have been submitted.
//   - The governor dispatches queued calls while in-flight < Limit();
//     a 429'd call goes back to the queue ahead of fresh calls and is
//     retried as soon as the limit allows.
//   - The provider has a hard concurrency cap: a call arriving while
//     cap calls are in flight is answered 429 at once (after
//     rejectLatency, 1µs: "immediately", but strictly after the
//     dispatch, as any real answer is); otherwise it answers after a
//     lognormal latency (median Latency, sigma Sigma). A call already
//     accepted runs to completion even if the cap drops below the
//     in-flight count.
//   - The cap can depend on how many calls have completed (CapAt).
//
// Goodput ratio = optimum makespan / actual makespan, where the optimum
// runs every phase at exactly its cap with median latency:
// sum over phases of ceil(calls in phase / cap) * Latency.

type simParams struct {
	Clients int
	Calls   int
	Latency time.Duration // median
	Sigma   float64
	Seed    uint64
	// Caps and Bounds: the cap is Caps[i] while completed calls <
	// Bounds[i] (the last cap applies to the rest).
	Caps   []int
	Bounds []int
	// Until, instead of Bounds, changes the cap with time as govbench's
	// S3 does: the cap is Caps[i] until Until[i].
	Until []time.Duration
	// Hint, if not zero, is the Retry-After of every 429, as the proxy
	// honours it: the call waits it out before its retry, and the lane
	// dispatches nothing, until it ends or a call of the lane succeeds.
	// A pause that ends with calls of the lane in flight lets one call
	// out, then none until a call ends other than by a 429 (package
	// queue).
	Hint time.Duration
	// Knee, if not zero, makes the provider a server that queues instead
	// of refusing (mockllm -knee): it answers no 429, and a call
	// dispatched with n calls in flight takes (n/Knee)² times its latency
	// beyond Knee. Caps is then []int{Knee}, for the optimum. Timeout,
	// if not zero, is the attempt timeout: a call that would take longer
	// times out then (the provider drops it) and is retried.
	Knee    int
	Timeout time.Duration
	// Mix, if set, multiplies each call's latency by one of its values,
	// drawn uniformly: calls whose output lengths differ.
	Mix   []float64
	Trace func(t time.Duration, limit, inFlight int, ev Event)
	// Sent and Answered, if set, are told of every call let out (with
	// the calls in flight, itself included) and every answer, with the
	// lane's controller: for tracing where each 429 comes from.
	Sent     func(ctl *Controller, t time.Duration, call, inFlight int)
	Answered func(ctl *Controller, t time.Duration, call int, o Outcome, ev Event)
}

type simResult struct {
	Makespan time.Duration
	Optimum  time.Duration
	Goodput  float64 // optimum / makespan
	Rejected int     // 429s answered
	Timeouts int     // attempts timed out
	Per100   float64 // 429s per 100 calls
	Events   [6]int
	Phases   []time.Duration // time at which each phase's last call completed
	MaxLimit int
}

const rejectLatency = time.Microsecond

type simEvent struct {
	at      time.Duration
	seq     uint64
	call    int
	reject  bool
	retry   bool // the call's hint is over: back to the queue's front
	timeout bool
	wake    bool // the lane's pause is over
	admit   bool // the lane's admission window is over (Controller.AdmitDue)
}

func (e simEvent) when() (time.Duration, uint64) { return e.at, e.seq }

// timed is an event of a simulation: its time, and the sequence number
// that keeps events of the same time in the order they were scheduled.
type timed interface {
	when() (time.Duration, uint64)
}

// eventHeap is a simulation's future events, earliest first.
type eventHeap[E timed] []E

func (h eventHeap[E]) Len() int { return len(h) }
func (h eventHeap[E]) Less(i, j int) bool {
	ai, si := h[i].when()
	aj, sj := h[j].when()
	if ai != aj {
		return ai < aj
	}
	return si < sj
}
func (h eventHeap[E]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap[E]) Push(x any)   { *h = append(*h, x.(E)) }
func (h *eventHeap[E]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (p simParams) capAt(completed int, now time.Duration) int {
	for i, u := range p.Until {
		if now < u {
			return p.Caps[i]
		}
	}
	for i, b := range p.Bounds {
		if completed < b {
			return p.Caps[i]
		}
	}
	return p.Caps[len(p.Caps)-1]
}

func (p simParams) optimum() time.Duration {
	if len(p.Mix) > 0 {
		// Calls take the mean of the mix times the median latency.
		var sum float64
		for _, m := range p.Mix {
			sum += m
		}
		q := p
		q.Mix, q.Latency = nil, time.Duration(float64(p.Latency)*sum/float64(len(p.Mix)))
		return q.optimum()
	}
	if p.Until != nil {
		// The first instant at which the integral of cap/Latency reaches
		// Calls (govbench's S3 optimum).
		var t time.Duration
		done := 0.0
		for i, c := range p.Caps {
			end := time.Duration(math.MaxInt64)
			if i < len(p.Until) {
				end = p.Until[i]
			}
			n := float64(c) * (end - t).Seconds() / p.Latency.Seconds()
			if done+n >= float64(p.Calls) {
				return t + time.Duration((float64(p.Calls)-done)/float64(c)*float64(p.Latency))
			}
			done += n
			t = end
		}
	}
	var rounds int
	prev := 0
	for i, c := range p.Caps {
		end := p.Calls
		if i < len(p.Bounds) {
			end = p.Bounds[i]
		}
		n := end - prev
		rounds += (n + c - 1) / c
		prev = end
	}
	return time.Duration(rounds) * p.Latency
}

func simulate(cfg Config, p simParams) simResult {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctl := New(cfg, epoch)
	rng := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	var (
		res       simResult
		events    eventHeap[simEvent]
		seq       uint64
		now       time.Duration
		queue     []int // front = next to dispatch; retries are put at the front
		dispatch  = map[int]time.Duration{}
		submitted int
		completed int
		inFlight  int // governor's count; equals the provider's
		paused    time.Duration
		waiting   = map[int]uint64{} // calls answered 429 waiting out their hint: the seq of its end
		hold      pauseHold
		admitAt   = time.Duration(-1) // when an admit event is scheduled
	)
	submit := func() {
		if submitted < p.Calls {
			queue = append(queue, submitted)
			submitted++
		}
	}
	// dispatchOne sends the call at the front of the queue.
	dispatchOne := func() {
		call := queue[0]
		queue = queue[1:]
		inFlight++
		dispatch[call] = now
		if p.Sent != nil {
			p.Sent(ctl, now, call, inFlight)
		}
		seq++
		if p.Knee == 0 && inFlight > p.capAt(completed, now) { // provider already at its cap
			heap.Push(&events, simEvent{at: now + rejectLatency, seq: seq, call: call, reject: true})
			return
		}
		lat := time.Duration(float64(p.Latency) * math.Exp(p.Sigma*rng.NormFloat64()))
		if len(p.Mix) > 0 {
			lat = time.Duration(float64(lat) * p.Mix[rng.IntN(len(p.Mix))])
		}
		if p.Knee > 0 && inFlight > p.Knee {
			r := float64(inFlight) / float64(p.Knee)
			lat = time.Duration(float64(lat) * r * r)
		}
		if p.Timeout > 0 && lat > p.Timeout {
			heap.Push(&events, simEvent{at: now + p.Timeout, seq: seq, call: call, timeout: true})
			return
		}
		heap.Push(&events, simEvent{at: now + lat, seq: seq, call: call})
	}
	pump := func() {
		if paused > 0 && now >= paused {
			// The pause is over.
			paused = 0
			hold.pauseEnded(inFlight)
		}
		for len(queue) > 0 && inFlight < ctl.Limit() && now >= paused && hold.open() {
			dispatchOne()
			hold.sent()
		}
		if l := ctl.Limit(); l > res.MaxLimit {
			res.MaxLimit = l
		}
		// The lane's start: a timer at the end of its admission window
		// (package lane arms one the same way).
		if due, ok := ctl.AdmitDue(); ok {
			if at := max(due.Sub(epoch), now); at != admitAt && inFlight > 0 {
				admitAt = at
				seq++
				heap.Push(&events, simEvent{at: at, seq: seq, admit: true})
			}
		}
	}
	for range p.Clients {
		submit()
	}
	pump()
	for events.Len() > 0 {
		e := heap.Pop(&events).(simEvent)
		now = e.at
		if e.admit {
			if e.at == admitAt {
				admitAt = -1
				res.Events[ctl.AdmitAt(inFlight, epoch.Add(now))]++
			}
			pump()
			continue
		}
		if e.retry || e.wake {
			if e.retry && waiting[e.call] == e.seq {
				delete(waiting, e.call)
				queue = append([]int{e.call}, queue...)
			}
			pump()
			continue
		}
		s := Sample{Outcome: Success, Latency: now - dispatch[e.call], InFlight: inFlight}
		if e.reject {
			s.Outcome = RateLimited
		}
		if e.timeout {
			s.Outcome = Timeout
		}
		ev := ctl.ObserveAt(s, epoch.Add(now))
		res.Events[ev]++
		if p.Answered != nil {
			p.Answered(ctl, now, e.call, s.Outcome, ev)
		}
		inFlight--
		hold.ended(e.reject, inFlight)
		if e.timeout {
			res.Timeouts++
			queue = append([]int{e.call}, queue...)
		} else if e.reject {
			res.Rejected++
			if p.Hint > 0 {
				seq++
				heap.Push(&events, simEvent{at: now + p.Hint, seq: seq, call: e.call, retry: true})
				waiting[e.call] = seq
				if now+p.Hint > paused {
					paused = now + p.Hint
					seq++
					heap.Push(&events, simEvent{at: paused, seq: seq, wake: true})
				}
			} else {
				queue = append([]int{e.call}, queue...)
			}
		} else {
			completed++
			paused = 0
			// The success ends the waits of the calls answered 429,
			// oldest call first.
			var back []int
			for call := range waiting {
				back = append(back, call)
			}
			slices.Sort(back)
			clear(waiting)
			queue = append(back, queue...)
			res.Makespan = now
			for i, b := range p.Bounds {
				if completed == b {
					res.Phases = append(res.Phases[:i], now)
				}
			}
			submit() // the client sends its next call
		}
		if p.Trace != nil {
			p.Trace(now, ctl.Limit(), inFlight, ev)
		}
		pump()
	}
	res.Optimum = p.optimum()
	res.Goodput = float64(res.Optimum) / float64(res.Makespan)
	res.Per100 = 100 * float64(res.Rejected) / float64(p.Calls)
	return res
}

// The scenarios: 64 closed-loop clients, 2000 calls, lognormal latency
// with a 20% spread (sigma 0.2); a fixed cap of 16, and a cap going
// 32 -> 8 -> 32 at 1/3 and 2/3 of the calls.
var simScenarios = []string{"cap16", "cap32-8-32"}

func scenario(name string, latency time.Duration, seed uint64) simParams {
	p := simParams{Clients: 64, Calls: 2000, Latency: latency, Sigma: 0.2, Seed: seed}
	switch name {
	case "cap16":
		p.Caps = []int{16}
	case "cap32-8-32":
		p.Caps = []int{32, 8, 32}
		p.Bounds = []int{p.Calls / 3, 2 * p.Calls / 3}
	case "s3":
		// govbench's S3: 3000 calls, cap 32, 8 from 20 one-minute-optimum
		// latencies... scaled to the latency: 125·L/3 per phase.
		p.Calls = 3000
		p.Caps = []int{32, 8, 32}
		phase := 125 * latency / 3
		p.Until = []time.Duration{phase, 2 * phase}
	default:
		panic("unknown scenario " + name)
	}
	return p
}

// simConfig is the lane configuration of the simulations: Governor's
// default GOVERNOR_MAX_CONCURRENCY, every other knob at its default.
func simConfig(p Preset) Config { return Config{Preset: p, Max: 64} }

// maxPer100 bounds the Default preset's 429s per 100 calls in the
// simulations. cap32-8-32 spends two thirds of its time at a cap of 8,
// where a probe (one 429) comes every 40 calls or so, and every round
// trip for the first minute of round trips after the drop (the lane
// recalls that it had 32): more 429s per call than govbench's S3, whose
// goal (2 per 100) s3 checks.
var maxPer100 = map[string]float64{"cap16": 2, "cap32-8-32": 2.8, "s3": 2}

// TestSimulation runs both presets through both scenarios and asserts
// loose bounds. The simulation is deterministic (simulated clock, seeded
// random source), so the bounds catch regressions, not timing noise.
func TestSimulation(t *testing.T) {
	for _, name := range simScenarios {
		t.Run(name, func(t *testing.T) {
			var got [2]simResult
			for _, preset := range []Preset{Default, Phoenix} {
				// The Default preset is clocked by round trips, so its
				// figures do not depend on the latency; Phoenix's 5s
				// windows do.
				for _, lat := range []time.Duration{time.Second, 5 * time.Second} {
					r := simulate(simConfig(preset), scenario(name, lat, 1))
					t.Logf("%-8s L=%-3v goodput %.3f, 429s/100 %.2f (makespan %v, optimum %v, decreases %d, collapses %d, max limit %d)",
						preset, lat, r.Goodput, r.Per100, r.Makespan.Round(time.Millisecond), r.Optimum,
						r.Events[Decreased], r.Events[Collapsed], r.MaxLimit)
					if lat == time.Second {
						got[preset] = r
					}
				}
			}
			def, phx := got[Default], got[Phoenix]
			assert.GreaterOrEqual(t, def.Goodput, 0.94, "default goodput, %s", name)
			assert.LessOrEqual(t, def.Per100, maxPer100[name], "default 429s per 100 calls, %s", name)
			assert.Zero(t, def.Events[Collapsed], "default must not collapse against a hard cap, %s", name)
			assert.LessOrEqual(t, def.MaxLimit, 34, "default overshoot (slow start adds 2 per success), %s", name)
			assert.Less(t, phx.Goodput, def.Goodput-0.3, "phoenix should be far behind, %s", name)
		})
	}
}

// TestSimulationSeeds checks that the default preset's figures hold over
// many seeds, not just the one reported.
func TestSimulationSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("many simulations")
	}
	// s3 is govbench's S3, whose phases last 20s each (a third of the
	// calls in cap32-8-32 takes 4 times longer at 8): the climb back to 32
	// weighs more: before the lane recalled its recent peak, the climb
	// took up to 2 s and s3 averaged 0.951, 0.935 in half of govbench's
	// runs; now 0.957.
	minMean := map[string]float64{"cap16": 0.954, "cap32-8-32": 0.955, "s3": 0.952}
	for _, name := range append(simScenarios, "s3") {
		// Also as govbench runs it: L = 480ms and mockllm's Retry-After of
		// one second on every 429, which the proxy honours.
		for _, hint := range []time.Duration{0, time.Second} {
			var sumG, sumR, minG float64 = 0, 0, 1
			const n = 40
			for seed := uint64(1); seed <= n; seed++ {
				p := scenario(name, time.Second, seed)
				if hint > 0 {
					p = scenario(name, 480*time.Millisecond, seed)
					p.Hint = hint
				}
				r := simulate(simConfig(Default), p)
				sumG += r.Goodput
				sumR += r.Per100
				minG = math.Min(minG, r.Goodput)
			}
			t.Logf("%-10s hint %-4v default over %d seeds: mean goodput %.3f (min %.3f), mean 429s/100 %.2f", name, hint, n, sumG/n, minG, sumR/n)
			assert.GreaterOrEqual(t, sumG/n, minMean[name], "mean goodput, %s, hint %v", name, hint)
			assert.GreaterOrEqual(t, minG, minMean[name]-0.02, "min goodput, %s, hint %v", name, hint)
			assert.LessOrEqual(t, sumR/n, maxPer100[name], "mean 429s per 100 calls, %s, hint %v", name, hint)
		}
	}
}

// TestSimulationClientLimited measures what the yield costs a lane that is
// alone and whose clients never fill its limit: 16 closed-loop clients, a
// provider that takes 64 at once, mockllm's latency. The lane never sees
// a 429, so it yields every 10 round trips (at least a second apart), and
// nobody takes what it gives back: its calls wait in the queue for about
// a round trip each time. The figure is the makespan its 16 clients would
// have with no governor at the median latency over its makespan: at most
// about 0.98, since latency with sigma 0.2 averages 2% above its median;
// 0.97 without the yield. DESIGN.md quotes it.
func TestSimulationClientLimited(t *testing.T) {
	const seeds = 20
	var sum float64
	for seed := uint64(1); seed <= seeds; seed++ {
		p := scenario("cap16", 480*time.Millisecond, seed)
		p.Clients, p.Caps, p.Hint = 16, []int{64}, time.Second
		r := simulate(simConfig(Default), p)
		bound := simParams{Calls: p.Calls, Latency: p.Latency, Caps: []int{p.Clients}}.optimum()
		sum += float64(bound) / float64(r.Makespan)
		assert.Zero(t, r.Rejected, "seed %d: nothing limits the lane but its clients", seed)
	}
	t.Logf("16 clients alone under a cap of 64: %.3f of what the clients allow (mean of %d seeds)", sum/seeds, seeds)
	assert.GreaterOrEqual(t, sum/seeds, 0.92, "what the yield costs a lone lane")
}

// BenchmarkSimulation reports the simulation's figures as metrics:
// goodput (optimum makespan / makespan) and 429s per 100 calls.
func BenchmarkSimulation(b *testing.B) {
	for _, preset := range []Preset{Default, Phoenix} {
		for _, name := range simScenarios {
			b.Run(preset.String()+"/"+name, func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulate(simConfig(preset), scenario(name, time.Second, 1))
				}
				b.ReportMetric(r.Goodput, "goodput")
				b.ReportMetric(r.Per100, "429s/100calls")
			})
		}
	}
}

// TestSimulationSmallCaps checks the goal of few 429s at every cap: a lane
// alone under a cap of 1 to 12 (64 clients, mockllm's latency and
// Retry-After) draws at most 2 429s per 100 calls once it has found the
// cap, counted between its 2,000th and 6,000th call (8 to 65 per 100 at
// caps of 1 to 4 when it probed every 1 + limit/3 round trips; 3.5, 2.7
// and 2.1 at caps of 6, 8 and 10 when a lane above 5/8 of Initial held
// at most ProbeHold round trips for good), and loses no goodput for it:
// above Initial (8) the start's overshoot and slow climb cost what they
// cost before.
func TestSimulationSmallCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("many simulations")
	}
	const seeds = 10
	for _, cap := range []int{1, 2, 3, 4, 5, 6, 8, 10, 12} {
		var steady, goodput, per100 float64
		for seed := uint64(1); seed <= seeds; seed++ {
			p := scenario("cap16", 480*time.Millisecond, seed)
			p.Caps, p.Hint = []int{cap}, time.Second
			first := simulate(simConfig(Default), p)
			p.Calls = 6000
			all := simulate(simConfig(Default), p)
			steady += 100 * float64(all.Rejected-first.Rejected) / 4000 / seeds
			goodput += first.Goodput / seeds
			per100 += first.Per100 / seeds
		}
		t.Logf("cap %d: goodput %.3f, 429s per 100 calls in the first 2,000 calls %.2f, from the 2,000th call on %.2f", cap, goodput, per100, steady)
		assert.LessOrEqual(t, steady, 2.0, "cap %d: 429s per 100 calls once the cap is found", cap)
		floor := 0.97
		if cap > 8 {
			floor = 0.95
		}
		assert.GreaterOrEqual(t, goodput, floor, "cap %d", cap)
	}
}

// pauseHold models, for the simulations, how package queue lets calls out
// after a Retry-After pause: a pause that ends with calls of the lane in
// flight lets one call out (the probe), then none until a call ends other
// than by a 429, or none is in flight. The zero value holds nothing.
type pauseHold struct{ holding, probe bool }

// pauseEnded notes the end of a pause with inFlight calls of the lane in
// flight.
func (h *pauseHold) pauseEnded(inFlight int) {
	if inFlight > 0 && !h.holding {
		h.holding, h.probe = true, true
	}
}

// open reports whether the lane may let a call out.
func (h *pauseHold) open() bool { return !h.holding || h.probe }

// sent notes a call let out.
func (h *pauseHold) sent() { h.probe = false }

// ended notes the end of a call of the lane, refused (a 429) or not,
// leaving inFlight in flight.
func (h *pauseHold) ended(refused bool, inFlight int) {
	if !refused || inFlight == 0 {
		h.holding = false
	}
}
