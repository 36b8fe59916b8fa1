package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machine describes where a run happened.
type machine struct {
	cpus      int
	cpuModel  string
	kernel    string
	goVersion string
	loadStart string
	loadEnd   string
	others    []string // other benchmark or soak processes running at the start
	during    []string // such processes seen at a sample during the run
}

// noteOthers records the other load running now.
func (m *machine) noteOthers() {
	for _, o := range otherLoad() {
		if !slices.Contains(m.during, o) {
			m.during = append(m.during, o)
		}
	}
}

func describeMachine() machine {
	m := machine{cpus: runtime.NumCPU(), goVersion: runtime.Version(), loadStart: loadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.cpuModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	}
	m.others = otherLoad()
	return m
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// otherLoad lists processes that would distort a soak: benchmarks and other
// soaks.
func otherLoad() []string {
	var out []string
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, path := range dirs {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(path)), "%d", &pid)
		if pid == self || pid == os.Getppid() {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		for _, name := range []string{"govbench", "govsoak"} {
			if strings.Contains(filepath.Base(strings.Fields(cmd)[0]), name) || strings.Contains(cmd, "./cmd/"+name) {
				out = append(out, fmt.Sprintf("%d %s", pid, truncate(cmd, 80)))
			}
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// runInfo is what a report says about the run besides its results.
type runInfo struct {
	command    string
	duration   time.Duration
	machine    machine
	mockArgs   []string
	govEnv     []string
	traffic    string
	unfinished int64
	govExit    error
	processErr error
}

func mib(kib int) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

// writeReport writes the run's report as Markdown.
func writeReport(w io.Writer, info runInfo, t tally, prov providerStats, samples []sample) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	m := info.machine
	p("### Soak report: %v of mixed traffic", info.duration)
	p("")
	p("Reproduce: `%s`", info.command)
	p("")
	p("- Machine: %d CPUs (%s), Linux %s, %s", m.cpus, m.cpuModel, m.kernel, m.goVersion)
	p("- Load average (1, 5, 15 min) at start: %s; at end: %s", m.loadStart, m.loadEnd)
	switch {
	case len(m.others) == 0 && len(m.during) == 0:
		p("- Other load: no benchmark or other soak running at the start or at any sample")
	case len(m.others) == 0:
		p("- Other load: none at the start; seen during the run: %s", strings.Join(m.during, "; "))
	default:
		p("- Other load: at the start %s; during the run %s", strings.Join(m.others, "; "), strings.Join(m.during, "; "))
	}
	p("- Provider: `mockllm %s`", strings.Join(info.mockArgs, " "))
	p("- Governor: `%s`", strings.Join(info.govEnv, " "))
	p("- Traffic: %s", info.traffic)
	p("")
	verdict := "PASS"
	if t.lost > 0 || t.duplicated > 0 || info.unfinished > 0 || info.govExit != nil || info.processErr != nil {
		verdict = "FAIL"
	}
	p("| result | count |")
	p("|---|---:|")
	p("| calls and batch items | %d |", t.calls)
	p("| completed | %d |", t.completed)
	p("| failed with an answer that says why | %d |", t.failed)
	p("| **lost** (no complete answer) | **%d** |", t.lost+int(info.unfinished))
	p("| **sent upstream more often than their attempts** | **%d** |", t.duplicated)
	p("| attempts Governor reported | %d |", t.attempts)
	p("| requests the provider saw for these calls | %d |", t.sent)
	p("| calls with attempts the provider never saw (cut before it read them) | %d |", t.unseen)
	p("| verdict | %s |", verdict)
	if info.unfinished > 0 {
		p("")
		p("%d calls had no answer when the run ended.", info.unfinished)
	}
	if info.govExit != nil {
		p("")
		p("Governor's exit: %v", info.govExit)
	}
	if info.processErr != nil {
		p("")
		p("A process failed during the run: %v", info.processErr)
	}
	p("")
	p("| kind | calls | completed | failed | lost | duplicated | time to answer p50 / p99 |")
	p("|---|---:|---:|---:|---:|---:|---:|")
	for _, k := range kinds {
		kt := t.byKind[k]
		p("| %s | %d | %d | %d | %d | %d | %v / %v |", k, kt.calls, kt.completed, kt.failed, kt.lost, kt.duplicated,
			kt.percentile(0.5).Round(time.Millisecond), kt.percentile(0.99).Round(time.Millisecond))
	}
	p("")
	p("Provider: %d requests; answered %s; 429 %d (its concurrency cap and forced); resets %d; hangs %d; streams started %d, completed %d, aborted %d; peak concurrency %d.",
		prov.Received, answered(prov.Answered), prov.RateLimited, prov.Resets, prov.Hangs,
		prov.StreamsStarted, prov.StreamsCompleted, prov.StreamsAborted, prov.MaxInFlight)
	p("")
	p("Governor over time: RSS from /proc; the heap live after the last GC from its gctrace; heap in use (live and garbage) and goroutines from its /metrics; /healthz timed on a new connection.")
	p("")
	p("| t | phase | RSS MiB | live heap MB | heap in use MiB | goroutines | threads | fds | in flight | queued | calls done | calls/s | /healthz |")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range samples {
		hz := s.healthz.Round(10 * time.Microsecond).String()
		if s.healthzErr != "" {
			hz = "error " + s.healthzErr
		}
		live := "–"
		if s.liveMB >= 0 {
			live = fmt.Sprint(s.liveMB)
		}
		p("| %v | %s | %s | %s | %s | %d | %d | %d | %d | %d | %d | %.0f | %s |", s.at.Round(time.Second), s.phase,
			mib(s.rssKiB), live, mib(s.heapKiB), s.goroutines, s.threads, s.fds, s.inFlight, s.queued, s.calls, s.perSecond, hz)
	}
	p("")
	p("%s", flatness(samples))
	if len(t.examples) > 0 {
		p("")
		p("Examples:")
		p("")
		for _, e := range t.examples {
			p("- %s", e)
		}
	}
}

func answered(m map[string]int64) string {
	var parts []string
	for _, code := range []string{"200", "429", "500", "502", "503", "529"} {
		if n := m[code]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", code, n))
		}
	}
	return strings.Join(parts, ", ")
}

// flatness sums up how memory and goroutines moved: the load samples of
// the first half against the second, and the idle process before and
// after the traffic.
func flatness(samples []sample) string {
	var load []sample
	var before, after *sample
	for i := range samples {
		switch samples[i].phase {
		case "load":
			load = append(load, samples[i])
		case "before":
			before = &samples[i]
		case "after":
			after = &samples[i]
		}
	}
	var b strings.Builder
	if len(load) >= 4 {
		half := len(load) / 2
		maxOf := func(ss []sample, f func(sample) int) int {
			m := 0
			for _, s := range ss {
				m = max(m, f(s))
			}
			return m
		}
		rss := func(s sample) int { return s.rssKiB }
		live := func(s sample) int { return s.liveMB }
		gor := func(s sample) int { return s.goroutines }
		r1, r2 := maxOf(load[:half], rss), maxOf(load[half:], rss)
		h1, h2 := maxOf(load[:half], live), maxOf(load[half:], live)
		g1, g2 := maxOf(load[:half], gor), maxOf(load[half:], gor)
		fmt.Fprintf(&b, "Under load, peak RSS %s MiB in the first half and %s MiB in the second (%+.0f%%); peak live heap %d MB and %d MB; peak goroutines %d and %d. ",
			mib(r1), mib(r2), 100*(float64(r2)/float64(max(r1, 1))-1), h1, h2, g1, g2)
	}
	if before != nil && after != nil {
		fmt.Fprintf(&b, "Idle before the traffic: %d goroutines, %d fds, %s MiB RSS; idle after it: %d goroutines, %d fds, %s MiB RSS.",
			before.goroutines, before.fds, mib(before.rssKiB), after.goroutines, after.fds, mib(after.rssKiB))
	}
	return b.String()
}
