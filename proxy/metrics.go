package proxy

import (
	"fmt"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/lane"
)

// proxyMetrics are the front's metrics. Every series a request touches is
// created up front, so the hot path looks nothing up and allocates nothing.
type proxyMetrics struct {
	inFlight atomic.Int64
	routes   map[string]*routeMetrics
	// refusedConns counts the client connections refused beyond
	// Config.MaxConnections.
	refusedConns *metrics.Counter
	// errors counts Governor's own error answers by code (see
	// errorCodes); otherError those of any other code.
	errors     map[string]*metrics.Counter
	otherError *metrics.Counter
}

// errorCodes are the codes of Governor's own errors that
// governor_errors_total counts by name; any other counts as "other".
// (too_many_connections has a counter of its own: it refuses a
// connection, not a request.)
var errorCodes = []string{
	CodeQueueFull, CodeQueueTimeout, CodeBuffersFull, CodeTooManyLanes, CodeDraining,
	CodeUpstreamUnreachable, CodeUpstreamTimeout, CodeUpstreamBadResponse, CodeExceedsTokenBudget,
	CodeBodyTooLarge, CodeBadRequest, CodeNotFound, CodeMethodNotAllowed, CodeUnauthorized, CodeClientClosed,
}

// routeMetrics are one route's series.
type routeMetrics struct {
	// requests counts answers by status class (index 1..5 for 1xx..5xx;
	// 0 for anything else).
	requests [6]*metrics.Counter
	// calls counts forwarded calls by how they ended (see callStatuses).
	calls [len(callStatuses)]*metrics.Counter
	// upstreamLatency observes the time from dispatch to response headers
	// of each upstream attempt; nil for Governor's own API.
	upstreamLatency *metrics.PrometheusHistogram
}

// callStatuses are the statuses a forwarded call ends with.
var callStatuses = [...]Status{StatusCompleted, StatusCompletedWithRetries, StatusFailed}

// apiRoute is the route label of Governor's own API.
const apiRoute = "governor"

func newProxyMetrics(set *metrics.Set, routes []string) *proxyMetrics {
	m := &proxyMetrics{routes: map[string]*routeMetrics{}}
	set.NewGauge("governor_in_flight_requests", func() float64 { return float64(m.inFlight.Load()) })
	m.refusedConns = set.NewCounter("governor_connections_refused_total")
	m.errors = make(map[string]*metrics.Counter, len(errorCodes))
	for _, code := range errorCodes {
		m.errors[code] = set.NewCounter(fmt.Sprintf(`governor_errors_total{code=%q}`, code))
	}
	m.otherError = set.NewCounter(`governor_errors_total{code="other"}`)
	for _, r := range append(routes, apiRoute) {
		rm := &routeMetrics{}
		for i := range rm.requests {
			class := "other"
			if i > 0 {
				class = fmt.Sprintf("%dxx", i)
			}
			rm.requests[i] = set.NewCounter(fmt.Sprintf(`governor_requests_total{route=%q,code=%q}`, r, class))
		}
		if r != apiRoute {
			for i, st := range callStatuses {
				rm.calls[i] = set.NewCounter(fmt.Sprintf(`governor_calls_total{route=%q,status=%q}`, r, st))
			}
			rm.upstreamLatency = set.NewPrometheusHistogramExt(
				fmt.Sprintf(`governor_upstream_latency_seconds{route=%q}`, r), lane.LatencyBuckets)
		}
		m.routes[r] = rm
	}
	return m
}

func (m *proxyMetrics) countRequest(route string, status int) {
	if rm := m.routes[route]; rm != nil {
		rm.countRequest(status)
	}
}

func (rm *routeMetrics) countRequest(status int) {
	class := status / 100
	if class < 1 || class > 5 {
		class = 0
	}
	rm.requests[class].Inc()
}

// countCall counts a forwarded call that has ended with status.
func (rm *routeMetrics) countCall(status Status) {
	for i, st := range callStatuses {
		if st == status {
			rm.calls[i].Inc()
			return
		}
	}
}

// countError counts an error of Governor's own with code, answered to a
// client or returned to the caller of Do.
func (m *proxyMetrics) countError(code string) {
	if c := m.errors[code]; c != nil {
		c.Inc()
		return
	}
	m.otherError.Inc()
}

// countError counts an error of Governor's own with code, answered to a
// client or returned to the caller of Do, and logs it if it turned a call
// away for want of room.
func (p *Proxy) countError(code string) {
	p.metrics.countError(code)
	p.refusals.refused(code, "")
}

// countCallError counts, as countError does, an error of Governor's own
// with code that ended a call of lane l, and counts it in the lane's
// refusals (queue_full, queue_timeout) too; its log line names the lane.
func (p *Proxy) countCallError(l *lane.Lane, code string) {
	p.metrics.countError(code)
	p.refusals.refused(code, l.ID())
	switch code {
	case CodeQueueFull:
		l.CountTurnedAway(lane.TurnedAwayQueueFull)
	case CodeQueueTimeout:
		l.CountTurnedAway(lane.TurnedAwayQueueTimeout)
	}
}
