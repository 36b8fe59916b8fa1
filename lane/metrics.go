package lane

import (
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
)

// LatencyBuckets are the buckets of Governor's latency histograms: they
// span a cached answer (5 ms) to a long generation (10 min).
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// laneMetrics are one lane's series, labelled by its id (bounded by
// Config.MaxLanes, and free of credentials).
type laneMetrics struct {
	attempts [len(outcomeNames)]*metrics.Counter
	retries  [len(outcomeNames)]*metrics.Counter
	// overloaded counts the attempts the provider refused as overloaded
	// (529, overloaded_error), which attempts counts as rate_limited.
	overloaded *metrics.Counter
	decreases  *metrics.Counter
	// byCause counts the cuts of the lane's limit by what made them:
	// the controller's decreases and collapses, its yields, and the
	// cuts taken from other Governors.
	byCause [numCauses]*metrics.Counter
	// refused counts the calls turned away from the lane's queue.
	refused   [numTurnaways]*metrics.Counter
	collapses *metrics.Counter
	pauses    *metrics.Counter
	queueWait *metrics.PrometheusHistogram
	// budgetWait observes the waits in a slot for a provider's budget,
	// the part of queueWait that Hold counts.
	budgetWait *metrics.PrometheusHistogram
	upstream   *metrics.PrometheusHistogram
	// promptTokens and completionTokens count the tokens of the lane's
	// answers, as their usage reports them.
	promptTokens, completionTokens *metrics.Counter
	names                          []string // every series of the lane, to unregister it
}

func newLaneMetrics(r *Registry, l *Lane) *laneMetrics {
	set := r.cfg.Metrics
	lbl := fmt.Sprintf("lane=%q", l.id)
	m := &laneMetrics{}
	name := func(format string, args ...any) string {
		n := fmt.Sprintf(format, args...)
		m.names = append(m.names, n)
		return n
	}
	m.overloaded = set.NewCounter(name("governor_lane_overloaded_total{%s}", lbl))
	m.decreases = set.NewCounter(name("governor_lane_decreases_total{%s}", lbl))
	for w := range numTurnaways {
		m.refused[w] = set.NewCounter(name("governor_lane_refused_total{%s,code=%q}", lbl, w))
	}
	for c := range numCauses {
		m.byCause[c] = set.NewCounter(name("governor_lane_decreases_by_cause_total{%s,cause=%q}", lbl, c))
	}
	m.collapses = set.NewCounter(name("governor_lane_collapses_total{%s}", lbl))
	m.pauses = set.NewCounter(name("governor_lane_pauses_total{%s}", lbl))
	m.queueWait = set.NewPrometheusHistogramExt(name("governor_queue_wait_seconds{%s}", lbl), LatencyBuckets)
	m.budgetWait = set.NewPrometheusHistogramExt(name("governor_lane_budget_wait_seconds{%s}", lbl), LatencyBuckets)
	m.upstream = set.NewPrometheusHistogramExt(name("governor_lane_upstream_latency_seconds{%s}", lbl), LatencyBuckets)
	m.promptTokens = set.NewCounter(name(`governor_lane_tokens_total{%s,kind="prompt"}`, lbl))
	m.completionTokens = set.NewCounter(name(`governor_lane_tokens_total{%s,kind="completion"}`, lbl))
	for i, o := range outcomeNames {
		m.attempts[i] = set.NewCounter(name("governor_attempts_total{%s,outcome=%q}", lbl, o))
		if Outcome(i).Retryable() {
			m.retries[i] = set.NewCounter(name("governor_retries_total{%s,reason=%q}", lbl, o))
		}
	}
	set.NewGauge(name("governor_lane_target{%s}", lbl), func() float64 { return l.ctrl.State().Target })
	// The limit this Governor applies: the controller's, or this
	// Governor's share of it when the lane is coordinated.
	set.NewGauge(name("governor_lane_limit{%s}", lbl), func() float64 { return float64(l.q.Stats().Limit) })
	set.NewGauge(name("governor_lane_in_flight{%s}", lbl), func() float64 { return float64(l.q.Stats().InFlight) })
	// The calls among them that wait in their slots for a provider's
	// budget (Hold): the rest are at the provider.
	set.NewGauge(name("governor_lane_held{%s}", lbl), func() float64 { return float64(l.Held()) })
	set.NewGauge(name("governor_lane_queued{%s}", lbl), func() float64 { return float64(l.q.Len()) })
	// 1 while the lane's dispatches are paused (a provider's Retry-After,
	// here or, on a coordinated lane, at another Governor).
	set.NewGauge(name("governor_lane_paused{%s}", lbl), func() float64 {
		if l.q.Stats().PausedUntil.After(r.cfg.Now()) {
			return 1
		}
		return 0
	})
	// One series per lane, whatever tenants send: their number, not
	// their names (GET /governor/lanes has those).
	set.NewGauge(name("governor_lane_tenants{%s}", lbl), func() float64 { return float64(len(l.q.Tenants())) })
	// 1 while the calls in flight to the lane's upstream fill its
	// connections and the lane has calls among them.
	set.NewGauge(name("governor_lane_conn_limited{%s}", lbl), func() float64 {
		if r.connLimited(r.upstreamInFlight(l), l.q.Stats().InFlight) {
			return 1
		}
		return 0
	})
	return m
}

// The families writeBudgets writes.
const (
	budgetPerMinute = "governor_lane_budget_per_minute"
	budgetRemaining = "governor_lane_budget_remaining"
	budgetShare     = "governor_lane_budget_share"
)

// budgetSample is one budget a lane knows, as the budget families show it.
type budgetSample struct {
	lane, kind                  string
	perMinute, remaining, share float64
}

// writeBudgets writes the provider budgets the lanes know, per lane and
// kind (requests, tokens, input_tokens, output_tokens), as three gauge
// families: the budget per minute as the provider last reported it, the
// share of it the lane takes as its own, and the estimate of what is left
// of that share now (what GET /governor/lanes shows as request_budget and
// token_budgets). A budget has series only while a lane knows it, so a
// lane's go when the lane does, and a lane has at most four.
func (r *Registry) writeBudgets(w io.Writer) {
	now := r.cfg.Now()
	var samples []budgetSample
	for _, l := range r.All() {
		if b := l.pace.info(now); b != nil {
			samples = append(samples, budgetSample{l.id, "requests", b.PerMinute, b.Remaining, b.Share})
		}
		for _, b := range l.tokens.info(now) {
			samples = append(samples, budgetSample{l.id, b.Kind, b.PerMinute, b.Remaining, b.Share})
		}
	}
	if len(samples) == 0 {
		return
	}
	var out bytes.Buffer
	for _, f := range []struct {
		name  string
		value func(budgetSample) float64
	}{
		{budgetPerMinute, func(b budgetSample) float64 { return b.perMinute }},
		{budgetRemaining, func(b budgetSample) float64 { return b.remaining }},
		{budgetShare, func(b budgetSample) float64 { return b.share }},
	} {
		metrics.WriteMetadataIfNeeded(&out, f.name, "gauge")
		for _, b := range samples {
			fmt.Fprintf(&out, "%s{lane=%q,kind=%q} %s\n", f.name, b.lane, b.kind,
				strconv.FormatFloat(f.value(b), 'g', -1, 64))
		}
	}
	_, _ = w.Write(out.Bytes())
}
