package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// S2 shared: several Governor processes spend one budget, as the replicas
// of a service spend one API key's: S2's request bucket (see goodputSpecs,
// requests per minute), or the matrix's OpenAI tokens-per-minute budget
// (see matrixSpecs, calls of mixed sizes). The budget reports itself on
// every answer (x-ratelimit-{limit,remaining,reset}-{requests,tokens}),
// or, for the token budget without headers (tpm-noheaders), only in the
// numbers of its 429s' messages, so each Governor's pacer learns its size
// and rate; what no answer says is how much of the refill the other
// Governors spend. Without
// coordination each Governor must find its share from the reports and its
// 429s; with coordination (redis) they book the request bucket together
// over a Redis that govbench starts, the reference (Redis shares no token
// budget: there each Governor still spends the tokens alone).
//
// bucketShareClients closed-loop clients, split evenly over the
// Governors, send calls from the start of the run until
// -s2shared-duration; every Governor runs from before the first call to
// after the last, so each could spend the whole budget alone. A cell runs
// for each budget of -s2shared-budgets, each count of
// -s2shared-governors, each latency of -s2shared-latencies (the request
// budget's; the token budget's calls take the TPM cells' latencies) and
// each of -s2shared-variants (none with every preset, redis with the
// default one).
const bucketShareClients = 64

// shareBudget is the budget the Governors of S2 shared spend.
type shareBudget int

const (
	shareRequests     shareBudget = iota // S2's request bucket
	shareTPM                             // the TPM cells' OpenAI token budget
	shareTPMNoHeaders                    // the same, stated only in its 429s' messages
)

var shareBudgetNames = [...]string{"requests", "tpm", "tpm-noheaders"}

func (b shareBudget) String() string { return shareBudgetNames[b] }

// headers says how a token budget reports itself.
func (b shareBudget) headers() string {
	if b == shareTPMNoHeaders {
		return "stated only in its 429s' messages"
	}
	return "with headers"
}

// parseShareBudgets parses -s2shared-budgets, in run order.
func parseShareBudgets(s string) ([]shareBudget, error) {
	want := map[shareBudget]bool{}
	for _, f := range splitList(s) {
		i := slices.Index(shareBudgetNames[:], f)
		if i < 0 {
			return nil, fmt.Errorf("unknown budget %q (want requests, tpm or tpm-noheaders)", f)
		}
		want[shareBudget(i)] = true
	}
	if len(want) == 0 {
		return nil, errors.New("empty")
	}
	var out []shareBudget
	for b := range shareBudgetNames {
		if want[shareBudget(b)] {
			out = append(out, shareBudget(b))
		}
	}
	return out, nil
}

// bucketShareRun is the outcome of one cell of S2 shared.
type bucketShareRun struct {
	budget    shareBudget
	governors int
	preset    string
	coord     coordination
	latency   time.Duration
	rate      float64 // the budget's refill, calls a second
	burst     int     // and its size, calls
	tpm       int     // the token budget, tokens a minute (0: requests)
	d         time.Duration
	// completed are the calls answered 2xx by d, optimum the most the
	// bucket allows by then: the burst, then the refill, each call
	// taking the median latency: b + r·(d − L).
	completed int
	optimum   float64
	perGov    []int // calls answered 2xx by d, by Governor
	tally     tally
	events    laneEvents
}

// label is the preset, with the coordination if any: "default + redis".
func (r bucketShareRun) label() string { return r.preset + r.coord.suffix() }

// goodput is the calls answered 2xx by the end over the most the bucket
// allows by then.
func (r bucketShareRun) goodput() float64 {
	if r.optimum <= 0 {
		return 0
	}
	return float64(r.completed) / r.optimum
}

// throughput is Governor i's rate of 2xx answers over the run.
func (r bucketShareRun) throughput(i int) float64 { return float64(r.perGov[i]) / r.d.Seconds() }

// fairness is Jain's index over the Governors' 2xx answers.
func (r bucketShareRun) fairness() float64 {
	x := make([]float64, len(r.perGov))
	for i := range x {
		x[i] = float64(r.perGov[i])
	}
	return jain(x)
}

// bucketShareOptimum is the most calls a bucket of burst b refilled at r
// a second lets finish within d, each taking l: b + r·(d − l).
func bucketShareOptimum(b int, r float64, d, l time.Duration) float64 {
	if d < l {
		return 0
	}
	return float64(b) + r*(d-l).Seconds()
}

// runBucketShares runs every cell of S2 shared that o selects, in order:
// by budget, latency, then Governors, then variant.
func runBucketShares(ctx context.Context, w *workspace, o *options, log io.Writer) ([]bucketShareRun, error) {
	var out []bucketShareRun
	for _, b := range o.bucketShareBudgets {
		latencies := o.bucketShareLatencies
		if b != shareRequests {
			latencies = []time.Duration{matrixTokenMeanLatency()}
		}
		rs, err := runBucketShareCells(ctx, w, o, b, latencies, log)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// runBucketShareCells runs the cells of S2 shared on budget b at each
// latency, by latency, then Governors, then variant.
func runBucketShareCells(ctx context.Context, w *workspace, o *options, b shareBudget, latencies []time.Duration, log io.Writer) ([]bucketShareRun, error) {
	var out []bucketShareRun
	for _, l := range latencies {
		for _, n := range o.bucketShareGovernors {
			for _, c := range o.bucketShareVariants {
				presets := o.presets
				if c != coordNone {
					if w.redisBin == "" || !slices.Contains(o.presets, "default") {
						continue
					}
					presets = []string{"default"}
				}
				for _, p := range presets {
					r, err := runBucketShare(ctx, w, o, b, n, l, p, c, log)
					if err != nil {
						return out, err
					}
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

// runBucketShare runs one cell: n Governors with the preset and the
// coordination given on budget b, calls of median latency l (a request
// budget's; a token budget's calls take the TPM cells' latencies, of mean
// l).
func runBucketShare(ctx context.Context, w *workspace, o *options, b shareBudget, n int, l time.Duration, preset string, coord coordination, log io.Writer) (run bucketShareRun, err error) {
	d := o.bucketShareDuration
	run = bucketShareRun{budget: b, governors: n, preset: preset, coord: coord, latency: l, d: d}
	var mc mockConfig
	body := func(int) []byte { return chatBody(false) }
	name := fmt.Sprintf("s2shared-%dgov-%v-%s%s", n, l, preset, strings.ReplaceAll(strings.ReplaceAll(coord.suffix(), " + ", "-"), ", ", "-"))
	switch b {
	case shareRequests:
		s2 := goodputSpecs(o)["s2"]
		run.rate, run.burst = s2.mock.rate, s2.mock.burst
		mc = mockConfig{latency: l, spread: latencySpread, seed: o.seed, rate: run.rate, burst: run.burst}
		fmt.Fprintf(log, "govbench: S2 shared by %d Governors, preset %s%s: bucket %.1f/s burst %d, latency %v, %v\n",
			n, preset, coord.suffix(), run.rate, run.burst, l, d)
	case shareTPM, shareTPMNoHeaders:
		run.rate, run.burst, run.tpm = matrixTokenRate, int(matrixTokenRate*60), matrixTPM()
		mc = mockConfig{latency: matrixTokenLatency, spread: latencySpread, seed: o.seed,
			fill: true, tokensPerSecond: matrixTokenSpeed, tpm: run.tpm, noHeaders: b == shareTPMNoHeaders}
		body = matrixBody(false)
		name = "s2shared-" + b.String() + "-" + strings.TrimPrefix(name, "s2shared-")
		fmt.Fprintf(log, "govbench: TPM (%s) shared by %d Governors, preset %s%s: %d tokens/min (%.1f calls/s, burst %d), mean latency %v, %v\n",
			b.headers(), n, preset, coord.suffix(), run.tpm, run.rate, run.burst, l, d)
	}
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	m, err := startMock(ctx, w, name+"-mockllm", mc)
	if err != nil {
		return run, err
	}
	g.add(m.Process)
	env := append([]string{"GOVERNOR_AIMD_PRESET=" + preset}, o.governorEnv...)
	if coord != coordNone {
		rs, err := startRedis(ctx, w, name+"-redis", "")
		if err != nil {
			return run, err
		}
		g.add(rs.Process)
		env = append(env, "GOVERNOR_REDIS_URL="+rs.url())
	}
	govs := make([]*governor, n)
	for i := range govs {
		gov, err := startGovernor(ctx, w, fmt.Sprintf("%s-governor%d", name, i+1), m.url, append(env, fmt.Sprintf("GOVERNOR_INSTANCE=%s-g%d", name, i+1))...)
		if err != nil {
			return run, err
		}
		g.add(gov.Process)
		govs[i] = gov
	}

	if err := m.reset(ctx); err != nil { // a full bucket at the start
		return run, err
	}
	t0 := time.Now()
	smp := startSampler(ctx, n, t0, sampleEvery(l))
	for i, gov := range govs {
		smp.set(i, gov)
	}
	clients := bucketShareClients / n
	results := make([][]callResult, n)
	var wg sync.WaitGroup
	for i, gov := range govs {
		wg.Go(func() {
			lc := newLoadClient(clients)
			defer lc.close()
			results[i] = runUntil(ctx, clients, t0, d, func(ctx context.Context, k int, buf []byte) callResult {
				id := fmt.Sprintf("%s-g%d-%06d", name, i+1, k)
				return lc.call(ctx, t0, request{url: gov.url + "/v1/chat/completions", body: body(k), id: id}, buf)
			})
		})
	}
	wg.Wait()
	samples := smp.stop()
	if err := ctx.Err(); err != nil {
		return run, err
	}
	if err := writeSamples(filepath.Join(w.dir, name+"-lanes.csv"), samples); err != nil {
		return run, err
	}
	if err := g.alive(); err != nil {
		return run, fmt.Errorf("%s shared by %d Governors, preset %s%s: %w", b, n, preset, coord.suffix(), err)
	}
	st, err := m.stats(ctx)
	if err != nil {
		return run, err
	}
	var all []callResult
	run.perGov = make([]int, n)
	for i, rs := range results {
		for _, r := range rs {
			if r.ok() && r.End <= d {
				run.perGov[i]++
				run.completed++
			}
		}
		all = append(all, rs...)
		ev, err := govs[i].events(ctx)
		if err != nil {
			return run, err
		}
		run.events = run.events.add(ev)
	}
	run.tally = tallyCalls(all, st)
	run.optimum = bucketShareOptimum(run.burst, run.rate, d, l)
	return run, nil
}

// writeBucketShares writes the tables of S2 shared, one a budget.
func writeBucketShares(w io.Writer, runs []bucketShareRun) {
	for _, b := range []shareBudget{shareRequests, shareTPM, shareTPMNoHeaders} {
		var of []bucketShareRun
		for _, r := range runs {
			if r.budget == b {
				of = append(of, r)
			}
		}
		if len(of) > 0 {
			writeBucketShareTable(w, of)
		}
	}
}

// writeBucketShareTable writes the table of S2 shared's runs on one
// budget.
func writeBucketShareTable(w io.Writer, runs []bucketShareRun) {
	t := table{
		header: []string{"Governors", "L", "preset", "calls", "goodput", "429s/100 calls", "Jain", "calls/s per Governor", "lost", "duplicated", "decreases / collapses / pauses"},
		align:  "rrlrrrrlrrr",
	}
	for _, r := range runs {
		per := make([]string, r.governors)
		for i := range per {
			per[i] = fmt.Sprintf("%.1f", r.throughput(i))
		}
		t.add(fmt.Sprint(r.governors), millis(r.latency), r.label(), r.tally.callsText(),
			fmt.Sprintf("%.3f (%d / %.0f)", r.goodput(), r.completed, r.optimum),
			fmt.Sprintf("%.2f", r.tally.per100()), fmt.Sprintf("%.3f", r.fairness()), strings.Join(per, " · "),
			r.tally.lostText(), fmt.Sprint(r.tally.duplicated), r.events.String())
	}
	r := runs[0]
	if r.budget != shareRequests {
		fmt.Fprintf(w, "\n## Goodput: an OpenAI TPM budget (%d tokens/min %s, %.1f calls/s of mixed sizes, a minute's worth at the start) shared by several Governors, %v\n\n%s",
			r.tpm, r.budget.headers(), r.rate, r.d, t.markdown())
		return
	}
	fmt.Fprintf(w, "\n## Goodput: S2's bucket (%.1f/s, burst %d) shared by several Governors, %v\n\n%s", r.rate, r.burst, r.d, t.markdown())
}
