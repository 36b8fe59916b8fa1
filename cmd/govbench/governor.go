package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmgovernor/governor/internal/proc"
)

// governor is a running Governor.
type governor struct {
	*proc.Process
	url      string // main listener, http://127.0.0.1:PORT
	adminURL string
}

// startGovernor starts Governor in front of upstream with its defaults,
// free loopback ports, and the extra GOVERNOR_* settings in env, and waits
// until /readyz answers 200.
func startGovernor(ctx context.Context, w *workspace, name, upstream string, env ...string) (*governor, error) {
	full := append(os.Environ(),
		"GOVERNOR_LISTEN=127.0.0.1:0",
		"GOVERNOR_ADMIN_LISTEN=127.0.0.1:0",
		"GOVERNOR_UPSTREAM="+upstream,
		"GOVERNOR_LOG_FORMAT=json",
		// Stops are part of govbench's cleanup, not of what it measures.
		"GOVERNOR_DRAIN_TIMEOUT=5s",
	)
	full = append(full, env...)
	p, err := startProcess(name, w.governorBin, nil, full, filepath.Join(w.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	// Governor logs its addresses when it starts: port 0 picks free ports.
	var started struct {
		Listen      string `json:"listen"`
		AdminListen string `json:"admin_listen"`
	}
	_, err = p.WaitForLine(ctx, func(line string) (string, bool) {
		if !strings.Contains(line, `"governor started"`) {
			return "", false
		}
		return "", json.Unmarshal([]byte(line), &started) == nil && started.Listen != ""
	})
	if err != nil {
		_ = p.Stop(stopTimeout)
		return nil, err
	}
	g := &governor{Process: p, url: "http://" + started.Listen, adminURL: "http://" + started.AdminListen}
	if err := p.WaitHTTP(ctx, g.adminURL+"/readyz"); err != nil {
		_ = p.Stop(stopTimeout)
		return nil, err
	}
	return g, nil
}

// laneInfo is the part of GET /governor/lanes that govbench reads.
type laneInfo struct {
	Limit    int `json:"limit"`
	InFlight int `json:"in_flight"`
	Held     int `json:"held"`
	Queued   int `json:"queued"`
}

// lanes sums the lanes of Governor (the benchmarks use one lane per
// process).
func (g *governor) lanes(ctx context.Context) (laneInfo, error) {
	var out struct {
		Lanes []laneInfo `json:"lanes"`
	}
	if err := getJSON(ctx, g.url+"/governor/lanes", &out); err != nil {
		return laneInfo{}, fmt.Errorf("%s lanes: %w", g.Name(), err)
	}
	var sum laneInfo
	for _, l := range out.Lanes {
		sum.Limit += l.Limit
		sum.InFlight += l.InFlight
		sum.Held += l.Held
		sum.Queued += l.Queued
	}
	return sum, nil
}

// laneEvents counts what the controllers of Governor's lanes did, from its
// /metrics: limit decreases, collapses to 1, and lane pauses on a
// provider's Retry-After.
type laneEvents struct {
	decreases, collapses, pauses int64
}

func (e laneEvents) add(o laneEvents) laneEvents {
	return laneEvents{e.decreases + o.decreases, e.collapses + o.collapses, e.pauses + o.pauses}
}

func (e laneEvents) String() string {
	return fmt.Sprintf("%d / %d / %d", e.decreases, e.collapses, e.pauses)
}

// events reads the lane counters of every lane.
func (g *governor) events(ctx context.Context) (laneEvents, error) {
	m, err := g.metrics(ctx)
	if err != nil {
		return laneEvents{}, err
	}
	return laneEvents{
		decreases: int64(m["governor_lane_decreases_total"]),
		collapses: int64(m["governor_lane_collapses_total"]),
		pauses:    int64(m["governor_lane_pauses_total"]),
	}, nil
}

// metrics reads the admin listener's /metrics: each series' value, summed
// over the labels of a metric name.
func (g *governor) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.adminURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", g.Name(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s metrics: status %d", g.Name(), resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", g.Name(), err)
	}
	return parseMetrics(string(b)), nil
}

// parseMetrics sums a Prometheus text exposition by metric name. Comments
// and lines it cannot read are skipped.
func parseMetrics(text string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		m[strings.TrimSpace(name)] += v
	}
	return m
}
