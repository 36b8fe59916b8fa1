package aimd

import (
	"container/heap"
	"flag"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A deterministic simulation of govbench's S4: several lanes, each a
// Governor process of its own with its own closed-loop clients, share one
// provider with a hard concurrency cap. Nothing connects the lanes: each
// learns only from its own answers. It models what the proxy does and the
// single-lane simulation leaves out:
//
//   - a 429 carries a Retry-After hint (Hint): the call waits it out before
//     it is retried, and its lane pauses dispatching, until the hint ends or
//     one of the lane's calls succeeds (package lane: Lane.Pause,
//     Lane.Answered, Lane.NextSuccess); a pause that ends with calls of the
//     lane in flight lets one call out, then none until a call ends other
//     than by a 429 (package queue);
//   - a 429 takes RejectLatency to come back;
//   - a freed slot at the provider goes to whichever lane dispatches next:
//     a lane dispatches only on its own events (an answer, a retry
//     returning, a pause ending, a client starting).
//
// Lane i's clients start at Starts[i] and stop sending at Stops[i].

type sharedParams struct {
	Clients       int // per lane
	Latency       time.Duration
	Sigma         float64
	Cap           int
	Hint          time.Duration
	RejectLatency time.Duration
	// ClientGap is the time from a 2xx answer to the client's next call
	// reaching its lane: the answer's way back and the next request's way
	// in, during which the freed slot is open to any lane.
	ClientGap     time.Duration
	Starts, Stops []time.Duration
	Seed          uint64
	// Window is where the aggregate is measured; All is where every lane
	// runs (Jain's index).
	Window, All [2]time.Duration
	Trace       func(t time.Duration, lane int, limits []int, inFlight []int, ev Event)
	// Sent and Answered, if set, are told of every call let out (with
	// its lane's calls in flight, itself included) and every answer, with
	// the lane's controller: for tracing where each 429 comes from.
	Sent     func(lane int, ctl *Controller, t time.Duration, call uint64, inFlight int)
	Answered func(lane int, ctl *Controller, t time.Duration, call uint64, o Outcome, ev Event)
}

type sharedResult struct {
	Aggregate float64   // 2xx answers in Window over Cap*len(Window)/Latency
	Jain      float64   // over per-lane 2xx answers in All
	PerLane   []float64 // 2xx answers per second in All
	Per100    float64   // 429s per 100 calls
	// Entry is, per lane, the time from its start to its first 2xx
	// answer (-1 if it never got one): how long it took to get a call
	// into a cap the others held.
	Entry     []time.Duration
	Decreases int
	Collapses int
	Yields    int
}

// s4Params is govbench's S4 at its default size: 4 lanes of 16 clients,
// cap 32, L = 480ms; lane i runs from 6i s to 42+6i s.
func s4Params(seed uint64) sharedParams {
	p := govbenchLanes(seed, 32)
	for i := range 4 {
		p.Starts = append(p.Starts, time.Duration(6*i)*time.Second)
		p.Stops = append(p.Stops, time.Duration(42+6*i)*time.Second)
	}
	p.Window = [2]time.Duration{6*time.Second + p.Latency, 54 * time.Second}
	p.All = [2]time.Duration{18 * time.Second, 42 * time.Second}
	return p
}

// govbenchLanes is what every lane of govbench's S4 has, with no lane
// yet: 16 closed-loop clients, mockllm's latency (median 480ms, spread
// 0.2) and Retry-After of one second, and a provider capped at cap.
func govbenchLanes(seed uint64, cap int) sharedParams {
	return sharedParams{Clients: 16, Latency: 480 * time.Millisecond, Sigma: 0.2, Cap: cap,
		Hint: time.Second, RejectLatency: time.Millisecond, ClientGap: 500 * time.Microsecond, Seed: seed}
}

const (
	shAnswer = iota
	shRetry  // a call joins its lane's queue (a 429'd call's hint is over, or a client's next call)
	shWake   // a lane's pause ends, or its clients start
	shAdmit  // a lane's admission window ends (Controller.AdmitDue)
)

type shEvent struct {
	at     time.Duration
	seq    uint64
	kind   int
	lane   int
	reject bool
	sent   time.Duration
	call   uint64 // an answer's call, numbered from 1 as let out
	// told: a shRetry that ends a 429'd call's wait for its hint, begun
	// in the lane's era (unless a success ended it first).
	told bool
	era  int
}

func (e shEvent) when() (time.Duration, uint64) { return e.at, e.seq }

func simulateShared(cfg Config, p sharedParams) sharedResult {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	n := len(p.Starts)
	type lane struct {
		ctl      *Controller
		queue    int // calls waiting (retries and fresh are alike here)
		inFlight int
		paused   time.Duration
		calls    int
		ok       [2]int // 2xx in All, in Window
		// waiting 429'd calls wait out their hints, until the lane's
		// next success (its successes count up to era).
		waiting, era int
		hold         pauseHold
		admitAt      time.Duration // when an shAdmit is scheduled; -1 if none
	}
	lanes := make([]lane, n)
	var (
		events   eventHeap[shEvent]
		seq      uint64
		now      time.Duration
		accepted int // calls the provider is running
		rejected int
		sent     int
	)
	push := func(e shEvent) {
		seq++
		e.seq = seq
		heap.Push(&events, e)
	}
	limits := make([]int, n)
	inFl := make([]int, n)
	pump := func(i int) {
		l := &lanes[i]
		if l.ctl == nil || now < l.paused {
			return
		}
		if l.paused > 0 {
			// The pause is over (it ended by time).
			l.paused = 0
			l.hold.pauseEnded(l.inFlight)
		}
		for l.queue > 0 && l.inFlight < l.ctl.Limit() && l.hold.open() {
			l.hold.sent()
			l.queue--
			l.inFlight++
			sent++
			call := uint64(sent)
			if p.Sent != nil {
				p.Sent(i, l.ctl, now, call, l.inFlight)
			}
			if accepted >= p.Cap {
				push(shEvent{at: now + p.RejectLatency, kind: shAnswer, lane: i, reject: true, sent: now, call: call})
				continue
			}
			accepted++
			lat := time.Duration(float64(p.Latency) * math.Exp(p.Sigma*rng.NormFloat64()))
			push(shEvent{at: now + lat, kind: shAnswer, lane: i, sent: now, call: call})
		}
		if due, ok := l.ctl.AdmitDue(); ok && l.inFlight > 0 {
			if at := max(due.Sub(epoch), now); at != l.admitAt {
				l.admitAt = at
				push(shEvent{at: at, kind: shAdmit, lane: i})
			}
		}
	}
	for i := range n {
		push(shEvent{at: p.Starts[i], kind: shWake, lane: i})
	}
	var res sharedResult
	res.Entry = make([]time.Duration, n)
	for i := range res.Entry {
		res.Entry[i] = -1
	}
	for events.Len() > 0 {
		e := heap.Pop(&events).(shEvent)
		now = e.at
		l := &lanes[e.lane]
		ev := None
		switch e.kind {
		case shAdmit:
			if e.at == l.admitAt {
				l.admitAt = -1
				ev = l.ctl.AdmitAt(l.inFlight, epoch.Add(now))
			}
		case shWake:
			if l.ctl == nil {
				l.ctl = New(cfg, epoch.Add(now))
				l.admitAt = -1
				l.queue = p.Clients
			}
		case shRetry:
			if !e.told {
				l.queue++
			} else if e.era == l.era {
				l.waiting--
				l.queue++
			}
		case shAnswer:
			s := Sample{Outcome: Success, Latency: now - e.sent, InFlight: l.inFlight}
			if e.reject {
				s.Outcome = RateLimited
			}
			ev = l.ctl.ObserveAt(s, epoch.Add(now))
			if p.Answered != nil {
				p.Answered(e.lane, l.ctl, now, e.call, s.Outcome, ev)
			}
			switch ev {
			case Decreased:
				res.Decreases++
			case Collapsed:
				res.Collapses++
			case Yielded:
				res.Yields++
			}
			l.inFlight--
			l.hold.ended(e.reject, l.inFlight)
			if e.reject {
				rejected++
				l.waiting++
				push(shEvent{at: now + p.Hint, kind: shRetry, lane: e.lane, told: true, era: l.era})
				if until := now + p.Hint; until > l.paused {
					l.paused = until
					push(shEvent{at: until, kind: shWake, lane: e.lane})
				}
			} else {
				accepted--
				if res.Entry[e.lane] < 0 {
					res.Entry[e.lane] = now - p.Starts[e.lane]
				}
				l.paused = 0
				l.queue += l.waiting
				l.waiting = 0
				l.era++
				l.calls++
				if now >= p.All[0] && now < p.All[1] {
					l.ok[0]++
				}
				if now >= p.Window[0] && now < p.Window[1] {
					l.ok[1]++
				}
				if now < p.Stops[e.lane] {
					push(shEvent{at: now + p.ClientGap, kind: shRetry, lane: e.lane}) // the client's next call
				}
			}
		}
		pump(e.lane)
		if p.Trace != nil {
			for i := range lanes {
				limits[i], inFl[i] = 0, lanes[i].inFlight
				if lanes[i].ctl != nil {
					limits[i] = lanes[i].ctl.Limit()
				}
			}
			p.Trace(now, e.lane, limits, inFl, ev)
		}
	}
	span := (p.All[1] - p.All[0]).Seconds()
	var sum, sq float64
	total := 0
	for i := range lanes {
		x := float64(lanes[i].ok[0]) / span
		res.PerLane = append(res.PerLane, x)
		sum += x
		sq += x * x
		total += lanes[i].ok[1]
	}
	res.Jain = sum * sum / (float64(n) * sq)
	res.Aggregate = float64(total) / (float64(p.Cap) * (p.Window[1] - p.Window[0]).Seconds() / p.Latency.Seconds())
	calls := 0
	for i := range lanes {
		calls += lanes[i].calls
	}
	res.Per100 = 100 * float64(rejected) / float64(max(calls, 1))
	return res
}

// sharedSeeds is how many seeds TestSimulationShared runs: 20 in CI; the
// figures DESIGN.md quotes are from 1000
// (go test ./aimd -run TestSimulationShared -v -shared-seeds 1000).
var sharedSeeds = flag.Int("shared-seeds", 20, "seeds of TestSimulationShared")

// TestSimulationShared runs S4 over many seeds with the Default preset and
// asserts loose bounds on the means and on how many seeds meet the
// benchmark's fairness goal (Jain >= 0.95): they catch regressions of the
// rules that make the lanes share (the yield, the newcomer rule, the give
// back above Initial, the probe hold that grows with the limit). One seed
// varies, as govbench's S4 does from run to run: before the give back
// above Initial, 58 of 100 seeds met the goal (Jain from 0.82 to 1). It
// also logs how the goal depends on how long the last lane to join took
// to get its first call in.
func TestSimulationShared(t *testing.T) {
	if testing.Short() {
		t.Skip("many simulations")
	}
	seeds := *sharedSeeds
	var sumJ, sumA, sumR float64
	minJ, minA := 1.0, 1.0
	collapses, fair, both := 0, 0, 0
	// Seeds whose last lane got its first call in within 3 s, or later,
	// and how many of each met both goals.
	var quick, slow, quickMet, slowMet int
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		r := simulateShared(simConfig(Default), s4Params(seed))
		if seed <= 3 {
			t.Logf("seed %d: aggregate %.3f, Jain %.3f, per lane %.1f, 429s/100 %.2f, decreases %d, collapses %d, yields %d, first call in after %v",
				seed, r.Aggregate, r.Jain, r.PerLane, r.Per100, r.Decreases, r.Collapses, r.Yields, r.Entry)
		}
		sumJ += r.Jain
		sumA += r.Aggregate
		collapses += r.Collapses
		sumR += r.Per100
		minJ = math.Min(minJ, r.Jain)
		minA = math.Min(minA, r.Aggregate)
		if r.Jain >= 0.95 {
			fair++
		}
		met := r.Jain >= 0.95 && r.Aggregate >= 0.93
		if met {
			both++
		}
		if last := r.Entry[len(r.Entry)-1]; last >= 0 && last < 3*time.Second {
			quick++
			if met {
				quickMet++
			}
		} else {
			slow++
			if met {
				slowMet++
			}
		}
	}
	n := float64(seeds)
	t.Logf("default over %d seeds: mean aggregate %.3f (min %.3f), mean Jain %.3f (min %.3f, %d seeds >= 0.95), both goals met in %d, mean 429s/100 %.2f",
		seeds, sumA/n, minA, sumJ/n, minJ, fair, both, sumR/n)
	t.Logf("the last lane got its first call in within 3 s in %d seeds (both goals met in %d), later in %d (met in %d)",
		quick, quickMet, slow, slowMet)
	assert.GreaterOrEqual(t, sumA/n, 0.94, "mean aggregate (0.938 before the yield of 30% every 10 round trips)")
	assert.GreaterOrEqual(t, sumJ/n, 0.97, "mean Jain")
	assert.GreaterOrEqual(t, fair, seeds*8/10, "seeds with Jain >= 0.95")
	assert.LessOrEqual(t, collapses, seeds/10, "collapses against a shared cap are rare")
}

// replicaParams is n Governors of 16 clients each sharing a cap, joining
// 2 s apart and running until 60 s; both measures span the time after the
// last has joined.
func replicaParams(seed uint64, n, cap int) sharedParams {
	p := govbenchLanes(seed, cap)
	for i := range n {
		p.Starts = append(p.Starts, time.Duration(2*i)*time.Second)
		p.Stops = append(p.Stops, 60*time.Second)
	}
	p.Window = [2]time.Duration{time.Duration(2*n)*time.Second + p.Latency, 60 * time.Second}
	p.All = p.Window
	return p
}

// TestSimulationManyReplicas checks the advice of README's "Running many
// replicas": without coordination, GOVERNOR_AIMD_INITIAL set to the
// account's concurrency divided by the number of Governors (8 on a cap of
// 32: 4) shares the cap fairly and starves nobody. With the default of 8
// the lanes that got in first keep about 8 each, since a lane at or below
// Initial keeps what it holds, and the last to join get almost nothing:
// the figures are logged, and README states them.
func TestSimulationManyReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("many simulations")
	}
	const seeds = 20
	run := func(initial float64) (jain, slowest float64, starved int) {
		slowest = math.Inf(1)
		for seed := uint64(1); seed <= seeds; seed++ {
			cfg := simConfig(Default)
			cfg.Initial = initial
			r := simulateShared(cfg, replicaParams(seed, 8, 32))
			jain += r.Jain / seeds
			for _, x := range r.PerLane {
				slowest = math.Min(slowest, x)
				if x < 1 {
					starved++
				}
			}
		}
		return jain, slowest, starved
	}
	j, slowest, starved := run(0)
	t.Logf("8 lanes, cap 32, Initial 8 (default): mean Jain %.3f, slowest lane %.1f calls/s, %d lanes of %d under 1 call/s", j, slowest, starved, 8*seeds)
	j, slowest, starved = run(4)
	t.Logf("8 lanes, cap 32, Initial 4: mean Jain %.3f, slowest lane %.1f calls/s, %d lanes of %d under 1 call/s", j, slowest, starved, 8*seeds)
	assert.GreaterOrEqual(t, j, 0.98, "mean Jain with Initial = cap / Governors")
	assert.GreaterOrEqual(t, slowest, 4.0, "every lane gets a share (an equal one is 8.3 calls/s)")
	assert.Zero(t, starved)
}
