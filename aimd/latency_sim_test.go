package aimd

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

var latencyMatrix = flag.Int("latency-matrix", 0, "seeds of TestLatencyMatrix (0: skip); prints the latency signal's matrix")

// matrixScenario is one row of the latency signal's matrix. max, if not
// zero, is the lane's Max (64 otherwise).
type matrixScenario struct {
	name string
	p    func(seed uint64) simParams
	max  int
}

func matrixScenarios() []matrixScenario {
	capped := func(name string, caps []int, sigma float64) matrixScenario {
		return matrixScenario{name: name, p: func(seed uint64) simParams {
			p := scenario("cap16", 480*time.Millisecond, seed)
			p.Caps, p.Sigma, p.Hint = caps, sigma, time.Second
			return p
		}}
	}
	// A cap the clients can fill: max(64, 2·cap) clients and a Max of
	// twice the cap above 64, as govbench's matrix runs it.
	large := func(c int) matrixScenario {
		return matrixScenario{name: fmt.Sprintf("cap %d σ0.2", c), max: 2 * c, p: func(seed uint64) simParams {
			p := capped("", []int{c}, 0.2).p(seed)
			p.Clients, p.Calls = 2*c, 30*c
			return p
		}}
	}
	// govbench's matrix cell: max(64, 30·cap) calls from max(64, 2·cap)
	// clients at latency l, a Retry-After of 1 s.
	cell := func(c int, l time.Duration) matrixScenario {
		sc := matrixScenario{name: fmt.Sprintf("cell %d %v", c, l), p: func(seed uint64) simParams {
			p := capped("", []int{c}, 0.2).p(seed)
			p.Latency, p.Calls, p.Clients = l, max(64, 30*c), max(64, 2*c)
			return p
		}}
		if c > 64 {
			sc.max = 2 * c
		}
		return sc
	}
	// govbench's matrix cell with -matrix-rounds 120 at 100 ms.
	cell120 := func(c int) matrixScenario {
		sc := cell(c, 100*time.Millisecond)
		return matrixScenario{name: fmt.Sprintf("cell120 %d 100ms", c), max: sc.max, p: func(seed uint64) simParams {
			p := sc.p(seed)
			p.Calls = max(64, 120*c)
			return p
		}}
	}
	// A cap that rises after 60 round trips at the optimum, and stays
	// for 60 more: how soon the lane finds it shows in the goodput.
	rise := func(from, to int) matrixScenario {
		return matrixScenario{name: fmt.Sprintf("cap %d→%d", from, to), p: func(seed uint64) simParams {
			p := capped("", []int{from, to}, 0.2).p(seed)
			p.Calls, p.Until = 60*from+60*to, []time.Duration{60 * p.Latency}
			return p
		}}
	}
	// Outputs of 64, 256 and 512 tokens at a fixed speed after a first
	// byte: latencies 5x apart from output length alone, each with a
	// 20% lognormal spread.
	mix := []float64{0.1 + 0.9*64/512, 0.1 + 0.9*256/512, 1}
	mixed := func(name string, caps []int) matrixScenario {
		return matrixScenario{name: name, p: func(seed uint64) simParams {
			p := scenario("cap16", 480*time.Millisecond, seed)
			p.Caps, p.Hint, p.Mix = caps, time.Second, mix
			return p
		}}
	}
	knee := func(n int, sigma float64) matrixScenario {
		return matrixScenario{name: fmt.Sprintf("knee %d σ%.1f", n, sigma), p: func(seed uint64) simParams {
			p := simParams{Clients: 64, Calls: 2000, Latency: time.Second, Sigma: sigma, Seed: seed,
				Caps: []int{n}, Knee: n, Timeout: 10 * time.Second}
			return p
		}}
	}
	// govbench's knee cell: max(64, 30·knee) calls from 64 clients,
	// 500 ms calls, a 10 s attempt timeout: 30 round trips at the
	// optimum, so the first seconds weigh.
	kneeCell := func(n int) matrixScenario {
		return matrixScenario{name: fmt.Sprintf("knee cell %d", n), p: func(seed uint64) simParams {
			p := knee(n, 0.2).p(seed)
			p.Latency, p.Calls = 500*time.Millisecond, max(64, 30*n)
			return p
		}}
	}
	out := []matrixScenario{
		capped("cap 1 σ0.2", []int{1}, 0.2),
		capped("cap 2 σ0.2", []int{2}, 0.2),
		capped("cap 4 σ0.2", []int{4}, 0.2),
		capped("cap 8 σ0.2", []int{8}, 0.2),
		capped("cap 16 σ0.2", []int{16}, 0.2),
		large(64), large(256),
		rise(2, 16), rise(4, 32),
		cell(1, 100*time.Millisecond), cell(2, 100*time.Millisecond), cell(4, 100*time.Millisecond),
		cell(1, 5*time.Second), cell(2, 5*time.Second), cell(4, 5*time.Second),
		capped("cap 16 σ0.8", []int{16}, 0.8),
		capped("cap 64 σ0.8", []int{64}, 0.8),
		capped("cap 16 σ0.4", []int{16}, 0.4),
		capped("cap 64 σ0.4", []int{64}, 0.4),
		mixed("cap 16 mix", []int{16}),
		mixed("cap 64 mix", []int{64}),
		{name: "s3 σ0.2", p: func(seed uint64) simParams {
			p := scenario("s3", 480*time.Millisecond, seed)
			p.Hint = time.Second
			return p
		}},
		{name: "s3 σ0.8", p: func(seed uint64) simParams {
			p := scenario("s3", 480*time.Millisecond, seed)
			p.Hint, p.Sigma = time.Second, 0.8
			return p
		}},
		knee(4, 0.2), knee(8, 0.2), knee(32, 0.2), knee(8, 0.8),
		kneeCell(4), kneeCell(8), kneeCell(32),
		{name: "knee 8 mix", p: func(seed uint64) simParams {
			p := knee(8, 0.2).p(seed)
			p.Mix = mix
			return p
		}},
		// Caps between Initial/2 and Initial, where S4's lanes live, and
		// govbench's cells there and with -matrix-rounds 120.
		capped("cap 5 σ0.2", []int{5}, 0.2),
		capped("cap 6 σ0.2", []int{6}, 0.2),
		cell(8, 100*time.Millisecond), cell(16, 100*time.Millisecond),
		cell120(1), cell120(2), cell120(4), cell120(8),
		// govbench's large cells: a cap at the lane's Max (64), and
		// one below a Max of twice the cap (256).
		cell(64, 100*time.Millisecond), cell(256, 100*time.Millisecond),
		cell120(16), cell120(64), cell120(256),
	}
	return out
}

// TestLatencyMatrix prints, for every scenario, the Default preset with
// and without the latency signal: mean and least goodput over seeds, 429s
// and timeouts per 100 calls. Run with -latency-matrix N -v.
func TestLatencyMatrix(t *testing.T) {
	if *latencyMatrix == 0 {
		t.Skip("run with -latency-matrix SEEDS -v")
	}
	n := *latencyMatrix
	for _, sc := range matrixScenarios() {
		var line string
		for _, tol := range []float64{-1, 0} {
			cfg := simConfig(Default)
			cfg.LatencyTolerance = tol
			if sc.max > 0 {
				cfg.Max = sc.max
			}
			var sumG, minG, sumR, sumT float64 = 0, 1, 0, 0
			var coll int
			for seed := uint64(1); seed <= uint64(n); seed++ {
				r := simulate(cfg, sc.p(seed))
				sumG += r.Goodput
				minG = min(minG, r.Goodput)
				sumR += r.Per100
				sumT += 100 * float64(r.Timeouts) / float64(sc.p(seed).Calls)
				coll += r.Events[Collapsed]
			}
			line += fmt.Sprintf(" | %.3f (min %.3f) %5.2f 429 %5.2f t/o %3d coll", sumG/float64(n), minG, sumR/float64(n), sumT/float64(n), coll)
		}
		t.Logf("%-14s%s", sc.name, line)
	}
}
