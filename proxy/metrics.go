package proxy

import (
	"fmt"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// proxyMetrics are the front's metrics. Every series a request touches is
// created up front, so the hot path looks nothing up and allocates nothing.
type proxyMetrics struct {
	inFlight atomic.Int64
	// requests[route][class] counts answers by route and status class
	// (index 1..5 for 1xx..5xx; 0 for anything else).
	requests map[string]*[6]*metrics.Counter
	// upstreamLatency[route] observes the time from dispatch to response
	// headers of each upstream attempt.
	upstreamLatency map[string]*metrics.PrometheusHistogram
}

// apiRoute is the route label of Governor's own API.
const apiRoute = "governor"

func newProxyMetrics(set *metrics.Set, routes []string) *proxyMetrics {
	m := &proxyMetrics{
		requests:        map[string]*[6]*metrics.Counter{},
		upstreamLatency: map[string]*metrics.PrometheusHistogram{},
	}
	set.NewGauge("governor_in_flight_requests", func() float64 { return float64(m.inFlight.Load()) })
	for _, r := range append(routes, apiRoute) {
		var cs [6]*metrics.Counter
		for i := range cs {
			class := "other"
			if i > 0 {
				class = fmt.Sprintf("%dxx", i)
			}
			cs[i] = set.NewCounter(fmt.Sprintf(`governor_requests_total{route=%q,code=%q}`, r, class))
		}
		m.requests[r] = &cs
		if r != apiRoute {
			m.upstreamLatency[r] = set.NewPrometheusHistogramExt(
				fmt.Sprintf(`governor_upstream_latency_seconds{route=%q}`, r), latencyBuckets)
		}
	}
	return m
}

// latencyBuckets span a cached answer (5 ms) to a long generation (10 min).
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func (m *proxyMetrics) countRequest(route string, status int) {
	cs := m.requests[route]
	if cs == nil {
		return
	}
	class := status / 100
	if class < 1 || class > 5 {
		class = 0
	}
	cs[class].Inc()
}
