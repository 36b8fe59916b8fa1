package aimd

import (
	"flag"
	"testing"
	"time"
)

var largeLanes = flag.Int("large-lanes", 0, "seeds of TestSimulationLargeLanes (0: skip); what the yields of lanes above Initial/0.3 calls do where lanes share a cap")

// TestSimulationLargeLanes measures what the yields of lanes holding more
// than Initial/0.3 calls do where lanes share a cap, the cases S4 (lanes of
// 16) does not reach: a process that joins one alone under a cap it fills
// (how long until its first call is in, and its share 100 to 200 round
// trips later), S4's schedule scaled up (lanes of cap/2 clients), S4 at
// 100 ms calls, and README's many replicas (Initial 4) over more seeds
// than TestSimulationManyReplicas runs. Run with -large-lanes SEEDS -v.
// DESIGN.md ("A yield of one slot while nobody asks") quotes it.
func TestSimulationLargeLanes(t *testing.T) {
	if *largeLanes == 0 {
		t.Skip("run with -large-lanes SEEDS -v")
	}
	seeds := *largeLanes
	n := float64(seeds)
	for _, lat := range []time.Duration{480 * time.Millisecond, 100 * time.Millisecond} {
		for _, c := range []int{64, 256} {
			// The joiner: lane 0 alone from 0, lane 1 from 120 round trips
			// on, c clients each; Max 64 at a cap of 64, twice the cap
			// above.
			var entry, share float64
			late := 0
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				p := govbenchLanes(seed, c)
				p.Clients, p.Latency = c, lat
				p.Starts = []time.Duration{0, 120 * lat}
				p.Stops = []time.Duration{320 * lat, 320 * lat}
				p.All = [2]time.Duration{220 * lat, 320 * lat}
				p.Window = p.All
				cfg := simConfig(Default)
				if c > 64 {
					cfg.Max = 2 * c
				}
				r := simulateShared(cfg, p)
				e := r.Entry[1]
				if e < 0 {
					e = 200 * lat
				}
				entry += e.Seconds() / n
				if e > 20*lat {
					late++
				}
				share += r.PerLane[1] / (r.PerLane[0] + r.PerLane[1]) / n
			}
			t.Logf("a lane joins one alone under a cap of %d, %v calls: first call in after %.2f s (later than 20 round trips in %d seeds of %d), its share %.3f",
				c, lat, entry, late, seeds, share)
			// S4's schedule scaled to the latency, lanes of c/2 clients.
			var jain, agg float64
			both := 0
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				p := s4Params(seed)
				p.Cap, p.Clients, p.Latency = c, c/2, lat
				scale := func(d time.Duration) time.Duration {
					return time.Duration(float64(d) * lat.Seconds() / 0.48)
				}
				for i := range p.Starts {
					p.Starts[i], p.Stops[i] = scale(p.Starts[i]), scale(p.Stops[i])
				}
				p.Window = [2]time.Duration{scale(6*time.Second) + lat, scale(54 * time.Second)}
				p.All = [2]time.Duration{scale(18 * time.Second), scale(42 * time.Second)}
				cfg := simConfig(Default)
				cfg.Max = max(64, 2*c)
				r := simulateShared(cfg, p)
				jain += r.Jain / n
				agg += r.Aggregate / n
				if r.Jain >= 0.95 && r.Aggregate >= 0.93 {
					both++
				}
			}
			t.Logf("S4 scaled to a cap of %d, %v calls: Jain %.3f, aggregate %.3f, both goals in %d seeds of %d", c, lat, jain, agg, both, seeds)
		}
	}
	both := 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		p := s4Params(seed)
		p.Latency = 100 * time.Millisecond
		r := simulateShared(simConfig(Default), p)
		if r.Jain >= 0.95 && r.Aggregate >= 0.93 {
			both++
		}
	}
	t.Logf("S4 with 100 ms calls: both goals in %d seeds of %d", both, seeds)
	var jain float64
	slowest, under := 100.0, 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		cfg := simConfig(Default)
		cfg.Initial = 4
		r := simulateShared(cfg, replicaParams(seed, 8, 32))
		jain += r.Jain / n
		for _, x := range r.PerLane {
			slowest = min(slowest, x)
			if x < 4 {
				under++
			}
		}
	}
	t.Logf("8 replicas, cap 32, Initial 4: Jain %.4f, slowest lane %.1f calls/s, %d lanes of %d under 4 calls/s", jain, slowest, under, 8*seeds)
}
