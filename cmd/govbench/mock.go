package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmgovernor/governor/internal/proc"
)

// mockConfig is the simulated provider of one scenario, as mockllm flags.
type mockConfig struct {
	latency        time.Duration
	spread         float64
	chunks         int
	maxConcurrency int
	rate           float64
	burst          int
	schedule       string // mockllm -schedule syntax
	seed           int64
	// Token budgets, output speed and a knee (the matrix scenarios).
	tpm, itpm, otpm int
	noHeaders       bool
	fill            bool
	tokensPerSecond float64
	knee            int
}

func (c mockConfig) args() []string {
	a := []string{
		"-listen", "127.0.0.1:0",
		"-latency", c.latency.String(),
		"-spread", strconv.FormatFloat(c.spread, 'g', -1, 64),
		"-seed", strconv.FormatInt(c.seed, 10),
	}
	if c.chunks > 0 {
		a = append(a, "-chunks", strconv.Itoa(c.chunks))
	}
	if c.maxConcurrency > 0 {
		a = append(a, "-max-concurrency", strconv.Itoa(c.maxConcurrency))
	}
	if c.rate > 0 {
		a = append(a, "-rate", strconv.FormatFloat(c.rate, 'f', -1, 64), "-burst", strconv.Itoa(c.burst))
	}
	if c.schedule != "" {
		a = append(a, "-schedule", c.schedule)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"-tpm", c.tpm}, {"-itpm", c.itpm}, {"-otpm", c.otpm}, {"-knee", c.knee}} {
		if f.v > 0 {
			a = append(a, f.name, strconv.Itoa(f.v))
		}
	}
	if c.noHeaders {
		a = append(a, "-no-ratelimit-headers")
	}
	if c.fill {
		a = append(a, "-fill-max-tokens")
	}
	if c.tokensPerSecond > 0 {
		a = append(a, "-tokens-per-second", strconv.FormatFloat(c.tokensPerSecond, 'f', -1, 64))
	}
	return a
}

// mock is a running mockllm.
type mock struct {
	*proc.Process
	url string // http://127.0.0.1:PORT
}

// startMock starts mockllm and waits until it listens.
func startMock(ctx context.Context, w *workspace, name string, cfg mockConfig) (*mock, error) {
	p, err := startProcess(name, w.mockBin, cfg.args(), nil, filepath.Join(w.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	const banner = "mockllm listening on "
	url, err := p.WaitForLine(ctx, func(line string) (string, bool) {
		return strings.CutPrefix(strings.TrimSpace(line), banner)
	})
	if err != nil {
		_ = p.Stop(stopTimeout)
		return nil, err
	}
	return &mock{Process: p, url: url}, nil
}

// mockStats is the part of mockllm's GET /stats that govbench reads.
type mockStats struct {
	Answered    map[int]int64    `json:"answered"`
	RateLimited int64            `json:"rate_limited"`
	ByRequestID map[string]int64 `json:"by_request_id"`
}

// answered2xx is the number of successful answers.
func (s mockStats) answered2xx() int64 {
	var n int64
	for code, c := range s.Answered {
		if code >= 200 && code < 300 {
			n += c
		}
	}
	return n
}

// stats reads the provider's counters.
func (m *mock) stats(ctx context.Context) (mockStats, error) {
	var st mockStats
	if err := getJSON(ctx, m.url+"/stats", &st); err != nil {
		return st, fmt.Errorf("%s stats: %w", m.Name(), err)
	}
	return st, nil
}

// reset zeroes the provider's counters and restarts its capacity schedule.
func (m *mock) reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url+"/stats/reset", nil)
	if err != nil {
		return err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s reset: %w", m.Name(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s reset: status %d", m.Name(), resp.StatusCode)
	}
	return nil
}

// adminClient reads the stats, lanes and metrics endpoints; it is separate
// from the load's clients so that polling never waits for a load
// connection. run closes its idle connections when it returns.
var adminClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
