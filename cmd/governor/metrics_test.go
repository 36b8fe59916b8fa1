package main

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// scrape returns a running Governor's /metrics.
func (g *governorProcess) scrape(t *testing.T) string {
	t.Helper()
	resp, err := oneShot.Get("http://" + g.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// sampleValue returns the value of the sample named exactly name (labels
// included), or -1.
func sampleValue(exposition, name string) float64 {
	for line := range strings.Lines(exposition) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// After calls, a batch and a stream, every family of Governor's on /metrics
// comes with one # HELP line that says something and one # TYPE line of
// its kind, before its samples; and README lists every family.
func TestMetricsAreDescribed(t *testing.T) {
	// A provider that reports its request and token budgets, far from
	// binding: the lanes' budget families are exported too.
	_, mockURL := startMock(t, mockllm.Config{Rate: 1000, TokensPerMinute: 10_000_000})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_ROUTES=anthropic="+mockURL)
	require.NoError(t, complete(call(g.base, false, 1), false))
	require.NoError(t, complete(call(g.base, true, 2), true))
	require.NoError(t, completeBatch(runBatch(g.base, 2), 2))
	out := g.scrape(t)

	described := map[string]metricFamily{}
	for _, f := range metricFamilies {
		described[f.name] = f
	}
	help, kind := map[string]int{}, map[string]string{}
	seen := map[string]bool{}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? \S+$`)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(f, " ")
			if strings.HasPrefix(name, "governor_") {
				help[name]++
				assert.NotEmpty(t, text, "HELP of %s", name)
			}
			continue
		}
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, k, _ := strings.Cut(f, " ")
			kind[name] = k
			continue
		}
		m := sample.FindStringSubmatch(line)
		require.NotNil(t, m, "not a sample line: %q", line)
		if !strings.HasPrefix(m[1], "governor_") {
			continue
		}
		f := familyOf(m[1], ptrs(metricFamilies))
		if !assert.NotNil(t, f, "%s has no row in metricFamilies (cmd/governor/metrics.go) and README's metrics table", m[1]) {
			continue
		}
		seen[f.name] = true
		assert.Equal(t, f.kind, kind[f.name], "# TYPE of %s must come before its sample %q", f.name, line)
	}
	for name := range seen {
		assert.Equal(t, 1, help[name], "# HELP lines of %s", name)
	}
	for _, name := range []string{"governor_requests_total", "governor_calls_total", "governor_upstream_latency_seconds",
		"governor_attempts_total", "governor_queue_wait_seconds", "governor_batch_items_total", "governor_draining"} {
		assert.True(t, seen[name], "%s not exported", name)
	}
	// The latency of each route's upstream is recorded, per attempt.
	assert.GreaterOrEqual(t, sampleValue(out, `governor_upstream_latency_seconds_count{route="default"}`), 4.0)
	// Forwarded calls are counted by how they ended; batch items apart.
	assert.Equal(t, 2.0, sampleValue(out, `governor_calls_total{route="default",status="COMPLETED"}`)+
		sampleValue(out, `governor_calls_total{route="default",status="COMPLETED_WITH_RETRIES"}`))
	assert.Equal(t, 0.0, sampleValue(out, `governor_calls_total{route="default",status="FAILED"}`))
	assert.Equal(t, 0.0, sampleValue(out, "governor_draining"))
	assert.True(t, seen["governor_lane_tokens_total"] && seen["governor_lane_paused"])
	for _, name := range []string{"governor_lane_budget_per_minute", "governor_lane_budget_remaining", "governor_lane_budget_share"} {
		assert.True(t, seen[name], "%s not exported", name)
	}
	assert.Equal(t, 10_000_000.0, sampleValue(out, `governor_lane_budget_per_minute{lane="default/m/`+laneHash(t, out)+`",kind="tokens"}`))
	assert.Positive(t, sampleValue(out, `governor_lane_tokens_total{lane="default/m/`+laneHash(t, out)+`",kind="completion"}`),
		"tokens of the calls, the stream and the batch")

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, f := range metricFamilies {
		assert.Contains(t, string(readme), "| `"+f.name, "README's metrics table lists %s", f.name)
	}
}

// laneHash returns the credential hash of the lane of model m.
func laneHash(t *testing.T, exposition string) string {
	m := regexp.MustCompile(`lane="default/m/([0-9a-f]+)"`).FindStringSubmatch(exposition)
	require.NotNil(t, m, "no lane of model m")
	return m[1]
}

func ptrs(fs []metricFamily) map[string]*metricFamily {
	m := make(map[string]*metricFamily, len(fs))
	for i := range fs {
		m[fs[i].name] = &fs[i]
	}
	return m
}

// While Governor drains, governor_draining is 1.
func TestDrainingGauge(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{Latency: 2 * time.Second})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_DRAIN_TIMEOUT=20s")
	done := make(chan answer, 1)
	go func() { done <- call(g.base, false, 1) }()
	require.Eventually(t, func() bool {
		return sampleValue(g.scrape(t), "governor_in_flight_requests") == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, g.cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool {
		return sampleValue(g.scrape(t), "governor_draining") == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.NoError(t, complete(<-done, false))
	assert.Equal(t, exitOK, g.exitCode(t, 20*time.Second))
}
