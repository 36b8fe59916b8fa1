package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// sample is Governor's state at one moment of the run.
type sample struct {
	at         time.Duration // since the traffic started
	phase      string        // "before", "load", "after"
	rssKiB     int
	heapKiB    int // go_memstats_heap_inuse_bytes
	liveMB     int // the heap live after the last GC, from gctrace in Governor's log; -1 if none yet
	goroutines int
	threads    int
	fds        int
	inFlight   int // governor_in_flight_requests
	queued     int // governor_lane_queued, summed
	calls      int // calls and batch items finished so far
	perSecond  float64
	healthz    time.Duration // one GET /healthz on a new connection
	healthzErr string
}

// sampler reads samples of one governor process.
type sampler struct {
	pid     int
	logPath string // Governor's stderr, with GODEBUG=gctrace=1 lines
	admin   string // admin base URL
	fresh   *http.Client
	ledger  *ledger
	start   time.Time
	last    sample
}

func newSampler(pid int, logPath, admin string, l *ledger) *sampler {
	return &sampler{pid: pid, logPath: logPath, admin: admin, ledger: l,
		fresh: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
}

func (s *sampler) take(ctx context.Context, phase string) sample {
	sm := sample{phase: phase, calls: s.ledger.len()}
	if !s.start.IsZero() {
		sm.at = time.Since(s.start)
	}
	sm.liveMB = -1
	if f, err := os.Open(s.logPath); err == nil {
		sm.liveMB = lastLiveHeap(f)
		f.Close()
	}
	st := procStatus(s.pid)
	sm.rssKiB, sm.threads = st["VmRSS"], st["Threads"]
	if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.pid)); err == nil {
		sm.fds = len(entries)
	}
	t0 := time.Now()
	status, _, err := s.get(ctx, "/healthz")
	sm.healthz = time.Since(t0)
	if err != nil || status != http.StatusOK {
		sm.healthzErr = fmt.Sprintf("%d %v", status, err)
	}
	if _, body, err := s.get(ctx, "/metrics"); err == nil {
		m := parseMetrics(body, "go_goroutines", "go_memstats_heap_inuse_bytes", "governor_in_flight_requests", "governor_lane_queued")
		sm.goroutines = int(m["go_goroutines"])
		sm.heapKiB = int(m["go_memstats_heap_inuse_bytes"] / 1024)
		sm.inFlight = int(m["governor_in_flight_requests"])
		sm.queued = int(m["governor_lane_queued"])
	}
	if dt := (sm.at - s.last.at).Seconds(); dt > 0 && phase == "load" {
		sm.perSecond = float64(sm.calls-s.last.calls) / dt
	}
	s.last = sm
	return sm
}

func (s *sampler) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.admin+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := s.fresh.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// procStatus reads the numeric fields of /proc/<pid>/status (kB values in
// KiB); empty where there is no procfs.
func procStatus(pid int) map[string]int {
	out := map[string]int{}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	defer f.Close()
	return parseProcStatus(f)
}

func parseProcStatus(r io.Reader) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))); err == nil {
			out[name] = n
		}
	}
	return out
}

// parseMetrics sums, for each of names, the values of its series in a
// Prometheus text exposition (every label set of a name adds up).
func parseMetrics(text string, names ...string) map[string]float64 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			// Labels may hold spaces: the value follows the last '}'.
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, rest = line[:i], line[j+1:]
		}
		fields := strings.Fields(rest)
		if !want[name] || len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// lastLiveHeap returns the heap live after the last GC that GODEBUG=gctrace=1
// reported in a log ("gc 12 @3.4s 1%: …, 7->8->3 MB, 8 MB goal, …": 3),
// or -1 if there is none.
func lastLiveHeap(r io.Reader) int {
	live := -1
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		for field := range strings.SplitSeq(line, ",") {
			field = strings.TrimSpace(field)
			sizes, ok := strings.CutSuffix(field, " MB")
			if !ok || strings.Count(sizes, "->") != 2 {
				continue
			}
			if n, err := strconv.Atoi(sizes[strings.LastIndex(sizes, "->")+2:]); err == nil {
				live = n
			}
		}
	}
	return live
}
