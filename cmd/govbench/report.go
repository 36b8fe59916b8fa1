package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// results are what the scenarios of one run produced; a scenario that did
// not run leaves its part empty.
type results struct {
	overhead *overheadResult
	goodput  []goodputRun // S1–S4, each preset, in run order
	// bucketShare is S2 shared, each cell in run order.
	bucketShare []bucketShareRun
	memory      *memoryResult
	matrix      []matrixRun
	tenants     *tenantsResult
}

// writeReport writes the Markdown report of a run.
func writeReport(w io.Writer, m machine, o *options, args []string, res *results, notes []string, took time.Duration) {
	fmt.Fprintf(w, "# govbench report\n\n")
	if o.smoke {
		fmt.Fprintf(w, "**Smoke run**: every scenario shrunk to seconds to keep the command working; the figures mean nothing.\n\n")
	}
	fmt.Fprintf(w, "- command: `govbench %s` (took %v)\n", strings.Join(args, " "), took.Round(time.Second))
	fmt.Fprintf(w, "- date: %s; commit: %s\n", m.date.Format(time.RFC3339), orDash(m.commit))
	fmt.Fprintf(w, "- machine: %d CPUs, %s, %s RAM, Linux %s; load average at start %s\n", m.cpus, orDash(m.cpuModel), orDash(m.memory), orDash(m.kernel), orDash(m.loadAvg))
	fmt.Fprintf(w, "- %s; nginx: %s\n", orDash(m.governor), orDash(m.nginx))
	for _, n := range notes {
		fmt.Fprintf(w, "- note: %s\n", n)
	}
	if res.overhead != nil {
		writeOverhead(w, res.overhead)
	}
	if len(res.goodput) > 0 {
		writeGoodput(w, res.goodput)
	}
	if len(res.bucketShare) > 0 {
		writeBucketShares(w, res.bucketShare)
	}
	if res.memory != nil {
		writeMemory(w, *res.memory)
	}
	if len(res.matrix) > 0 {
		writeMatrix(w, res.matrix)
	}
	if res.tenants != nil {
		writeTenants(w, *res.tenants)
	}
	if g := evaluateGoals(res); len(g.rows) > 0 {
		fmt.Fprintf(w, "\n## Goals (default preset)\n\n%s", g.markdown())
	}
}

func writeOverhead(w io.Writer, r *overheadResult) {
	for _, mode := range overheadModes {
		sse := mode == "sse"
		t := table{header: []string{"clients", "target", "calls", "req/s", "vs direct", "p50", "p99", "added p50", "added p99"}}
		if sse {
			t.header = append(t.header, "first byte p50", "added first byte")
		}
		t.header = append(t.header, "CPU/call", "peak RSS", "errors")
		t.align = "lllrrrrrrrrrrrr"
		for _, c := range r.clientLevels(mode) {
			direct := r.cells[overheadKey{mode, c, targetDirect}]
			for _, name := range r.targets {
				cell := r.cells[overheadKey{mode, c, name}]
				if cell == nil {
					continue
				}
				p50, p99 := percentile(cell.lat, 50), percentile(cell.lat, 99)
				d50, d99 := percentile(direct.lat, 50), percentile(direct.lat, 99)
				row := []string{fmt.Sprint(c), name, fmt.Sprint(cell.calls), fmt.Sprintf("%.0f", cell.rps()),
					ratio(cell.rps(), direct.rps()), micros(p50), micros(p99)}
				if name == targetDirect {
					row = append(row, "—", "—")
				} else {
					row = append(row, addedMicros(p50-d50), addedMicros(p99-d99))
				}
				if sse {
					f50 := percentile(cell.ttfb, 50)
					row = append(row, micros(f50))
					if name == targetDirect {
						row = append(row, "—")
					} else {
						row = append(row, addedMicros(f50-percentile(direct.ttfb, 50)))
					}
				}
				if name == targetDirect {
					row = append(row, "—", "—")
				} else {
					row = append(row, micros(cell.cpuPerCall()), mib(cell.hwm))
				}
				t.add(append(row, fmt.Sprint(cell.errors))...)
			}
		}
		fmt.Fprintf(w, "\n## Overhead: %s\n\n%s", strings.ToUpper(mode), t.markdown())
	}
	fmt.Fprintf(w, "\nWhile these were measured, processes other than govbench's used %.0f%% of the machine's CPU (0%% is a quiet machine).\n", 100*r.otherCPU)
}

// clientLevels lists the concurrency levels measured for mode, ascending.
func (r *overheadResult) clientLevels(mode string) []int {
	var out []int
	for k := range r.cells {
		if k.mode == mode && k.target == targetDirect {
			out = append(out, k.clients)
		}
	}
	slices.Sort(out)
	return out
}

func writeGoodput(w io.Writer, runs []goodputRun) {
	t := table{
		header: []string{"scenario", "preset", "L", "calls", "optimum", "makespan", "goodput", "lost", "duplicated", "429s/100 calls", "decreases / collapses / pauses", "convergence", "use per phase"},
		align:  "lllrrrrrrrrll",
	}
	s4 := table{
		header: []string{"preset", "calls", "aggregate goodput", "Jain (all four)", "calls/s per process (all four)", "lost", "duplicated", "429s/100 calls", "decreases / collapses / pauses", "convergence", "use per phase"},
		align:  "lrrrlrrrrll",
	}
	for _, r := range runs {
		if r.s4 != nil {
			s := r.s4
			per := make([]string, sharedProcs)
			for i := range per {
				per[i] = fmt.Sprintf("%.1f", s.throughput(i))
			}
			s4.add(r.label(), fmt.Sprint(r.tally.calls),
				fmt.Sprintf("%.3f (%d / %.0f)", r.goodput(), s.completed, s.optimum),
				fmt.Sprintf("%.3f", s.fairness()), strings.Join(per, " · "),
				r.tally.lostText(), fmt.Sprint(r.tally.duplicated), fmt.Sprintf("%.2f", r.tally.per100()), r.events.String(), convText(r.conv),
				phasesText(r.phases))
			continue
		}
		makespan, good := secs(r.makespan), fmt.Sprintf("%.3f", r.goodput())
		if r.cutOff {
			makespan, good = "> "+makespan, "< "+good
		}
		t.add(r.title, r.preset, millis(r.latency), r.tally.callsText(), secs(r.optimum), makespan, good,
			r.tally.lostText(), fmt.Sprint(r.tally.duplicated), fmt.Sprintf("%.2f", r.tally.per100()), r.events.String(), convText(r.conv),
			phasesText(r.phases))
	}
	if len(t.rows) > 0 {
		fmt.Fprintf(w, "\n## Goodput\n\n%s", t.markdown())
	}
	if len(s4.rows) > 0 {
		fmt.Fprintf(w, "\n## Goodput: S4, %d Governor processes sharing a cap of %d\n\n%s", sharedProcs, sharedCap, s4.markdown())
	}
}

// convText is "start 1.2 s · →8 3.4 s · →32 none".
func convText(cs []convergence) string {
	if len(cs) == 0 {
		return "n/a"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		v := "none"
		if c.ok {
			v = fmt.Sprintf("%.1f s", c.after.Seconds())
		}
		parts[i] = c.change.label + " " + v
	}
	return strings.Join(parts, " · ")
}

// phasesText is "start 0.97 · →8 0.93 · →32 0.88", or "—".
func phasesText(ps []phaseUse) string {
	if len(ps) == 0 {
		return "—"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s %.2f", p.label, p.use)
	}
	return strings.Join(parts, " · ")
}

func writeMemory(w io.Writer, r memoryResult) {
	t := table{
		header: []string{"calls waiting", "RSS at start", "idle RSS", "RSS with calls waiting", "peak RSS", "per waiting call", "Go heap in use per call", "Go stacks per call", "goroutines per call"},
		align:  "rrrrrrrrr",
	}
	g := r.perCallGo()
	t.add(fmt.Sprint(r.waiting), mib(r.startRSS), mib(r.idleRSS), mib(r.heldRSS), mib(r.heldHWM), fmt.Sprintf("%.1f KiB", r.perCall()/1024),
		fmt.Sprintf("%.1f KiB", g.heap/1024), fmt.Sprintf("%.1f KiB", g.stacks/1024), fmt.Sprintf("%.2f", g.goroutines))
	fmt.Fprintf(w, "\n## Memory\n\n%s", t.markdown())
}

func micros(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func addedMicros(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("−%d µs", (-d).Microseconds())
	}
	return fmt.Sprintf("+%d µs", d.Microseconds())
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
