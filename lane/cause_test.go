package lane_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/lane"
)

// promValue returns the value of the series name in set's text, or -1
// when there is none.
func promValue(t *testing.T, set *metrics.Set, name string) float64 {
	t.Helper()
	for line := range strings.Lines(promText(set)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			require.NoError(t, err, line)
			return f
		}
	}
	return -1
}

// laneOf returns a registry of cfg (a metrics set of its own unless cfg
// has one) and its lane default/m, closed when the test ends.
func laneOf(t *testing.T, cfg lane.Config) (*lane.Registry, *lane.Lane) {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	r, err := lane.New(cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return r, l
}

// jsonLog returns a logger that writes JSON lines to buf.
func jsonLog(buf *bytes.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(buf, nil)) }

// Each decrease of a lane's limit is counted by its cause, and the log
// line of the decrease names the same cause, so that an operator can tell
// a provider overloaded from an account's limit, a budget spent, a
// timeout.
func TestDecreasesAreCountedByCause(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := metrics.NewSet()
	r, l := laneOf(t, lane.Config{AIMD: aimd.Config{Max: 64}, Metrics: set, Now: func() time.Time { return now }, Logger: jsonLog(&buf)})
	series := func(cause string) string {
		return fmt.Sprintf(`governor_lane_decreases_by_cause_total{lane=%q,cause=%q}`, l.ID(), cause)
	}
	for _, c := range []string{"rate_limited", "overloaded", "request_budget", "token_budget", "timeout", "latency", "yield", "other_governor"} {
		require.Zero(t, promValue(t, set, series(c)), "every cause has its series from the start: %s", c)
	}

	// The lane's start ends at its first refusal.
	l.ObserveRefusal(lane.RefusedLimit, 10*time.Millisecond, now, now)
	assert.EqualValues(t, 1, promValue(t, set, series("rate_limited")))
	ended := logLines(t, &buf, "lane start ended by a refusal")
	require.Len(t, ended, 1, buf.String())
	assert.Equal(t, "rate_limited", ended[0]["cause"])

	// Then, each after answers, and more than a log summary interval
	// after the last, so that each is logged: a refusal of each kind,
	// and a timeout.
	for i, tc := range []struct {
		cause   string
		observe func(sent, now time.Time)
	}{
		{"overloaded", func(sent, now time.Time) { l.ObserveRefusal(lane.RefusedOverloaded, now.Sub(sent), sent, now) }},
		{"token_budget", func(sent, now time.Time) { l.ObserveRefusal(lane.RefusedTokenBudget, now.Sub(sent), sent, now) }},
		{"rate_limited", func(sent, now time.Time) { l.ObserveRefusal(lane.RefusedLimit, now.Sub(sent), sent, now) }},
		{"request_budget", func(sent, now time.Time) {
			// The lane knows the budget when it lets the call out: the
			// refusal says its count was wrong.
			seq, _ := l.Reserve(context.Background(), sent)
			l.ObserveBudget(lane.Budget{Limit: 600, Remaining: 599, Reset: 100 * time.Millisecond}, seq, sent, sent)
			seq, _ = l.Reserve(context.Background(), sent)
			l.ObserveBudget(lane.Budget{Limit: 600, Remaining: 0, Reset: time.Second}, seq, sent, now)
			l.ObserveEmptyBudget(seq, now.Sub(sent), sent, now)
		}},
		{"timeout", func(sent, now time.Time) { l.Observe(lane.Timeout, now.Sub(sent), sent, now) }},
	} {
		for range 20 {
			now = now.Add(100 * time.Millisecond)
			l.Observe(lane.Answered, 10*time.Millisecond, now, now)
		}
		now = now.Add(lane.SummaryInterval)
		before := promValue(t, set, series(tc.cause))
		tc.observe(now.Add(-10*time.Millisecond), now)
		assert.Equal(t, before+1, promValue(t, set, series(tc.cause)), tc.cause)
		lines := logLines(t, &buf, "lane limit decreased")
		require.Len(t, lines, i+1, "%s: %s", tc.cause, buf.String())
		assert.Equal(t, tc.cause, lines[i]["cause"])
		assert.Equal(t, tc.cause, r.Info(now)[0].LastDecreaseCause)
	}
	assert.EqualValues(t, 1, promValue(t, set, fmt.Sprintf(`governor_lane_overloaded_total{lane=%q}`, l.ID())),
		"an overloaded refusal is counted as such")
	assert.EqualValues(t, 6, promValue(t, set, fmt.Sprintf(`governor_lane_decreases_total{lane=%q}`, l.ID())),
		"every decrease is counted in the total too")
	info := r.Info(now)[0]
	assert.Equal(t, "timeout", info.LastDecreaseReason)
	assert.EqualValues(t, 5, info.RateLimited, "4 refusals and the start's")
}

// A collapse is counted by its cause too (and in
// governor_lane_collapses_total), and its log line names that cause.
func TestCollapseIsCountedByCause(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := metrics.NewSet()
	r, l := laneOf(t, lane.Config{AIMD: aimd.Config{Preset: aimd.Phoenix, Max: 64}, Metrics: set, Now: func() time.Time { return now }, Logger: jsonLog(&buf)})

	// Phoenix collapses at its second error within 15 s.
	for range 2 {
		now = now.Add(100 * time.Millisecond)
		l.ObserveRefusal(lane.RefusedOverloaded, 10*time.Millisecond, now, now)
	}
	lines := logLines(t, &buf, "lane collapsed")
	require.Len(t, lines, 1, buf.String())
	assert.Equal(t, "overloaded", lines[0]["cause"])
	assert.EqualValues(t, 1, promValue(t, set, fmt.Sprintf(`governor_lane_collapses_total{lane=%q}`, l.ID())))
	assert.EqualValues(t, 1, promValue(t, set, fmt.Sprintf(`governor_lane_decreases_by_cause_total{lane=%q,cause="overloaded"}`, l.ID())))
	assert.Equal(t, "overloaded", r.Info(now)[0].LastDecreaseCause)
}

// The budgets a lane learns from its provider are on /metrics, per lane
// and kind, with the same figures as GET /governor/lanes; a lane that
// knows none has no budget series.
func TestBudgetsAreGauges(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := metrics.NewSet()
	r, l := laneOf(t, lane.Config{AIMD: aimd.Config{Max: 64}, Metrics: set, Now: func() time.Time { return now }})
	families := []string{"governor_lane_budget_per_minute", "governor_lane_budget_remaining", "governor_lane_budget_share"}
	for _, family := range families {
		assert.NotContains(t, promText(set), family, "no budget known, no series")
	}

	seq, _ := l.Reserve(context.Background(), now)
	l.ObserveBudget(lane.Budget{Limit: 600, Remaining: 500, Reset: 10 * time.Second}, seq, now, now)
	l.ObserveTokens(lane.TokenReport{Kind: lane.InputTokens, Limit: 40000, Remaining: 30000}, lane.TokenMark{}, now, now)

	info := r.Info(now)[0]
	require.NotNil(t, info.RequestBudget)
	require.Len(t, info.TokenBudgets, 1)
	series := func(family, kind string) string {
		return fmt.Sprintf(`%s{lane=%q,kind=%q}`, family, l.ID(), kind)
	}
	assert.Equal(t, info.RequestBudget.PerMinute, promValue(t, set, series(families[0], "requests")))
	assert.Equal(t, info.RequestBudget.Remaining, promValue(t, set, series(families[1], "requests")))
	assert.Equal(t, info.RequestBudget.Share, promValue(t, set, series(families[2], "requests")))
	assert.EqualValues(t, 40000, promValue(t, set, series(families[0], "input_tokens")))
	assert.Equal(t, info.TokenBudgets[0].Remaining, promValue(t, set, series(families[1], "input_tokens")))
	assert.Less(t, promValue(t, set, series(families[1], "input_tokens")), 40000.0)
	assert.EqualValues(t, -1, promValue(t, set, series(families[0], "output_tokens")),
		"a budget the provider did not report has no series")
}

// A failed attempt's log line says what went wrong, when the caller says
// it; the summary line that follows shows the last one's.
func TestFailureLinesSayWhy(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, l := laneOf(t, lane.Config{AIMD: aimd.Config{Max: 8}, Now: func() time.Time { return now }, Logger: jsonLog(&buf)})

	refused := "connection error: dial tcp 127.0.0.1:1: connect: connection refused"
	l.ObserveFailure(lane.ConnError, refused, time.Millisecond, now, now)
	l.ObserveFailure(lane.ConnError, "connection error: EOF", time.Millisecond, now, now)
	now = now.Add(lane.SummaryInterval)
	l.ObserveFailure(lane.ServerError, "503 Service Unavailable", time.Millisecond, now, now)
	l.Observe(lane.Answered, time.Millisecond, now, now)
	lines := logLines(t, &buf, "upstream attempt failed")
	require.Len(t, lines, 3, buf.String())
	assert.Equal(t, refused, lines[0]["error"])
	assert.Equal(t, "503 Service Unavailable", lines[1]["error"])
	assert.Equal(t, "connection error: EOF", lines[2]["error"], "the summary shows the last of those it counts")
	assert.NotContains(t, lines[2], "more", "it was the only one counted")
}

// A lane's budget series go with the lane when it is evicted.
func TestBudgetSeriesGoWithTheirLane(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	set := metrics.NewSet()
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 64}, MaxLanes: 1, Metrics: set, Now: func() time.Time { return now }})
	require.NoError(t, err)
	defer r.Close()
	a, err := r.Get(lane.Key{Upstream: "default", Model: "m", Credential: [32]byte{1}})
	require.NoError(t, err)
	a.ObserveTokens(lane.TokenReport{Kind: lane.Tokens, Limit: 30000, Remaining: 20000}, lane.TokenMark{}, now, now)
	require.Contains(t, promText(set), `governor_lane_budget_per_minute{lane="`+a.ID()+`",kind="tokens"} 30000`)

	now = now.Add(2*time.Minute + time.Second) // idle past the eviction bound (defaults)
	b, err := r.Get(lane.Key{Upstream: "default", Model: "m", Credential: [32]byte{2}})
	require.NoError(t, err)
	require.Len(t, r.All(), 1, "the idle lane made room")
	assert.NotContains(t, promText(set), a.ID())
	assert.NotContains(t, promText(set), "governor_lane_budget_per_minute", "the new lane knows no budget yet")
	assert.Contains(t, promText(set), b.ID())
}
