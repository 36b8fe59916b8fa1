package lane_test

import (
	"bytes"
	"context"
	"encoding/json"
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

func logLines(t *testing.T, buf *bytes.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// A storm of 429s, each pausing the lane, is logged as its first pause
// and then one line per SummaryInterval saying how many more came; the
// pause counter still counts every one.
func TestRepeatedPausesAreSummarised(t *testing.T) {
	var buf bytes.Buffer
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	set := metrics.NewSet()
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 8}, Metrics: set, Now: func() time.Time { return now },
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	require.NoError(t, err)
	defer r.Close()
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)

	// 300 pauses, 100 ms apart, each one later than the last: 30 s.
	for i := range 300 {
		now = start.Add(time.Duration(i) * 100 * time.Millisecond)
		l.Pause(now.Add(time.Second), now)
		l.Observe(lane.RateLimited, 50*time.Millisecond, now, now)
	}
	lines := logLines(t, &buf, "lane paused")
	// The first at once, then one each time 10 s have passed: at 0, 10,
	// 20 s. The line at 10 s says 99 more came since the first.
	require.Len(t, lines, 3, buf.String())
	assert.NotContains(t, lines[0], "more")
	assert.EqualValues(t, 99, lines[1]["more"])
	assert.Equal(t, "10s", lines[1]["in"])
	assert.EqualValues(t, 99, lines[2]["more"])

	// What the last 10 s held is written once the interval has passed and
	// the lane is used again.
	now = now.Add(lane.SummaryInterval)
	l.Observe(lane.Answered, 50*time.Millisecond, now, now)
	lines = logLines(t, &buf, "lane paused")
	require.Len(t, lines, 4)
	assert.EqualValues(t, 98, lines[3]["more"], "the line shows the last of the 99")
	assert.Contains(t, lines[3], "until", "the last pause's attributes")

	var total float64
	for _, l := range lines {
		total++
		if m, ok := l["more"].(float64); ok {
			total += m
		}
	}
	assert.EqualValues(t, 300, total, "the lines account for every pause")
	assert.Contains(t, promText(set), `governor_lane_pauses_total{lane="default/m/000000000000"} 300`)

	decreases := logLines(t, &buf, "lane limit decreased")
	collapses := logLines(t, &buf, "lane collapsed")
	assert.LessOrEqual(t, len(decreases)+len(collapses), 8, "a decrease or collapse per 10 s at most, of each kind")
}

func promText(set *metrics.Set) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	return b.String()
}

// oneLane returns a registry of its own and its one lane, with a limit of
// at most max, on the clock now; the registry closes when the test ends.
func oneLane(t *testing.T, max int, now func() time.Time) (*lane.Registry, *lane.Lane) {
	t.Helper()
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: max}, Metrics: metrics.NewSet(), Now: now})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return r, l
}

// NextSuccess's channel is closed by the lane's next success and by
// nothing else; each success ends the waits begun before it.
func TestNextSuccessIsClosedByTheNextSuccess(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, l := oneLane(t, 8, func() time.Time { return now })

	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	first := l.NextSuccess()
	assert.Equal(t, first, l.NextSuccess(), "waits before one success share its channel")
	l.Pause(now.Add(30*time.Second), now)
	l.Observe(lane.RateLimited, time.Millisecond, now, now)
	assert.False(t, closed(first), "a 429 or a pause does not end the wait")
	l.Answered(now)
	assert.True(t, closed(first), "the success ends it")
	second := l.NextSuccess()
	assert.False(t, closed(second), "a wait begun after that success waits for the next")
	l.Answered(now)
	assert.True(t, closed(second))
}

// A lane whose calls succeed but take three times as long once its limit
// has risen (a server that queues instead of answering 429) shows
// "latency" as the reason of its last decrease.
func TestLatencyDecreaseIsShownAsLatency(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, l := oneLane(t, 64, func() time.Time { return start })

	// 8 calls sent at the start take 1 s; 8 sent later, under the limit
	// they raised, take 3 s.
	for i, lat := range []float64{1, 3} {
		sent := start.Add(time.Duration(6*i) * time.Second)
		for j := range 8 {
			d := time.Duration((lat + 0.01*float64(j%3)) * float64(time.Second))
			l.Observe(lane.Answered, d, sent, sent.Add(d).Add(time.Duration(j)*time.Millisecond))
		}
	}
	info := r.Info(start.Add(10 * time.Second))
	require.Len(t, info, 1)
	assert.Equal(t, "latency", info[0].LastDecreaseReason)
	assert.Equal(t, "latency", info[0].LastDecreaseCause)
	assert.Less(t, info[0].Limit, 24, "cut back from the level the calls slowed at")
}

// A 429 of an empty request budget (ObserveEmptyBudget) is counted as a
// 429. Of a call let out before the lane knew the budget, it leaves the
// Default controller's limit (the pacer meets it); of a call the pacer let
// out knowing the budget, it lowers the limit as any 429 does, since the
// pacer's count was wrong. Phoenix's controller, which has no pacer of its
// own to lean on, hears it either way and decreases when its feedback
// window ends.
func TestEmptyBudgetRefusal(t *testing.T) {
	for _, tc := range []struct {
		name      string
		preset    aimd.Preset
		paced     bool // the pacer knew the budget when it let the call out
		decreases uint64
	}{
		{"default, sent before the budget was known", aimd.Default, false, 0},
		{"default, sent knowing the budget", aimd.Default, true, 1},
		{"phoenix, sent before the budget was known", aimd.Phoenix, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			r, err := lane.New(lane.Config{AIMD: aimd.Config{Preset: tc.preset, Max: 16}, Metrics: metrics.NewSet(),
				Now: func() time.Time { return start }})
			require.NoError(t, err)
			t.Cleanup(r.Close)
			l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
			require.NoError(t, err)

			seq, _ := l.Reserve(context.Background(), start)
			if tc.paced {
				// An earlier call's answer tells the budget: 10 a second.
				l.ObserveBudget(lane.Budget{Limit: 10, Remaining: 9, Reset: 100 * time.Millisecond}, seq, start, start)
				seq, _ = l.Reserve(context.Background(), start)
			}
			answered := start.Add(20 * time.Millisecond)
			l.ObserveBudget(lane.Budget{Limit: 10, Remaining: 0, Reset: time.Second}, seq, start, answered)
			l.ObserveEmptyBudget(seq, 20*time.Millisecond, start, answered)
			// A success a whole feedback window later ends Phoenix's window.
			later := start.Add(6 * time.Second)
			l.Observe(lane.Answered, time.Second, later.Add(-time.Second), later)
			info := r.Info(later)[0]
			assert.EqualValues(t, 1, info.RateLimited, "counted as a 429")
			assert.Equal(t, tc.decreases, info.Decreases)
		})
	}
}

// An upstream that does not answer is in the logs: the first failed
// attempt of each outcome at once, at warn level, then one line per
// SummaryInterval with how many more came.
func TestFailedAttemptsAreLogged(t *testing.T) {
	var buf bytes.Buffer
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 8}, Metrics: metrics.NewSet(), Now: func() time.Time { return now },
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	require.NoError(t, err)
	defer r.Close()
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)

	// 120 connection errors 100 ms apart (12 s), a timeout among them.
	for i := range 120 {
		now = start.Add(time.Duration(i) * 100 * time.Millisecond)
		l.Observe(lane.ConnError, time.Millisecond, now, now)
		if i == 5 {
			l.Observe(lane.Timeout, time.Second, now, now)
		}
	}
	l.Observe(lane.Answered, time.Millisecond, now, now) // answers say nothing
	lines := logLines(t, &buf, "upstream attempt failed")
	require.Len(t, lines, 3, buf.String())
	assert.Equal(t, "connection_error", lines[0]["outcome"])
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, l.ID(), lines[0]["lane"])
	assert.NotContains(t, lines[0], "more")
	assert.Equal(t, "timeout", lines[1]["outcome"], "each outcome has its own first line")
	assert.Equal(t, "connection_error", lines[2]["outcome"])
	assert.EqualValues(t, 99, lines[2]["more"], "the line at 10 s counts the 99 since the first")
}

// A refusal that ends a new lane's start, below the level the lane was
// heading for but above the one call it had, is not logged as a limit
// that fell from 1 to more; a later decrease is, from and to.
func TestStartEndedIsNotLoggedAsADecrease(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 64}, Metrics: metrics.NewSet(), Now: func() time.Time { return now },
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	require.NoError(t, err)
	defer r.Close()
	l, err := r.Get(lane.Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	require.Equal(t, 1, r.Info(now)[0].Limit, "a new lane starts with one call")

	l.Observe(lane.RateLimited, 10*time.Millisecond, now, now)
	limit := r.Info(now)[0].Limit
	require.Greater(t, limit, 1, "the start is over: the lane asks at its level")
	assert.Empty(t, logLines(t, &buf, "lane limit decreased"), buf.String())
	ended := logLines(t, &buf, "lane start ended by a refusal")
	require.Len(t, ended, 1, buf.String())
	assert.EqualValues(t, limit, ended[0]["limit"])
	assert.Equal(t, "rate_limited", ended[0]["cause"])

	// Answers, then a refusal of a call sent after them: a decrease.
	for range 20 {
		now = now.Add(100 * time.Millisecond)
		l.Observe(lane.Answered, 10*time.Millisecond, now, now)
	}
	now = now.Add(time.Second)
	l.Observe(lane.RateLimited, 10*time.Millisecond, now, now)
	lines := logLines(t, &buf, "lane limit decreased")
	require.Len(t, lines, 1, buf.String())
	assert.Less(t, lines[0]["to"].(float64), lines[0]["from"].(float64))
	assert.EqualValues(t, r.Info(now)[0].Limit, lines[0]["to"])
}
