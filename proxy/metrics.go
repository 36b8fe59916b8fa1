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
