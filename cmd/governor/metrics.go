package main

import (
	"bytes"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// metricFamily describes one family of Governor's metrics: /metrics
// writes its kind and meaning as the family's # TYPE and # HELP lines, and
// README's Operations section lists it with the same meaning.
type metricFamily struct {
	name, kind, help string
}

// metricFamilies are all of Governor's own metrics. A family registered
// anywhere must have a row here (TestMetricsAreDescribed checks it on a
// running Governor).
var metricFamilies = []metricFamily{
	{"governor_build_info", "gauge", "Always 1; labels version and goversion say what is running."},
	{"governor_draining", "gauge", "1 from SIGTERM/SIGINT/SIGHUP until the process exits, while queued and in-flight calls finish."},
	{"governor_in_flight_requests", "gauge", "Forwarded calls in progress, queued and streaming ones included (batch items and requests to Governor's API are not)."},
	{"governor_connections_refused_total", "counter", "Client connections on the main listener beyond GOVERNOR_MAX_CONNECTIONS, answered 503 too_many_connections and closed."},
	{"governor_client_connections", "gauge", "Client connections open on the main listener."},
	{"governor_client_connections_max", "gauge", "The most client connections the main listener holds (GOVERNOR_MAX_CONNECTIONS, or its default from the open-file and memory limits; 0: no bound)."},
	{"governor_buffered_request_bytes", "gauge", "Request bodies held by calls waiting or in flight (and reserved for bodies being read) and by running async jobs, at most GOVERNOR_MAX_BUFFERED_BYTES."},
	{"governor_buffered_answer_bytes", "gauge", "Successful answers of forwarded calls read whole and not yet written to their clients, at most GOVERNOR_MAX_BUFFERED_BYTES."},
	{"governor_requests_total", "counter", "Answers by route and HTTP status class (code=1xx..5xx, other) to the requests Governor took in; those refused at the door (malformed, too large, buffers_full) are in governor_errors_total only."},
	{"governor_errors_total", "counter", "Errors of Governor's own answered to forwarded calls, batch items and requests it could not serve, by code (queue_full, queue_timeout, buffers_full, too_many_lanes, draining, upstream_unreachable, upstream_timeout, exceeds_token_budget, client_closed, ...; other for any other)."},
	{"governor_calls_total", "counter", "Forwarded calls by route and how they ended (status=COMPLETED, COMPLETED_WITH_RETRIES, FAILED)."},
	{"governor_upstream_latency_seconds", "histogram", "Upstream attempts by route: dispatch to response headers (waiting for a connection included)."},
	{"governor_attempts_total", "counter", "Upstream attempts by lane and outcome (answered, rate_limited, quota_exhausted, server_error, timeout, connection_error, client_gone)."},
	{"governor_retries_total", "counter", "Retries by lane and the outcome that caused them (reason)."},
	{"governor_lane_target", "gauge", "The lane's controller target (the shared target on a coordinated lane)."},
	{"governor_lane_limit", "gauge", "Calls the lane may have in flight here now."},
	{"governor_lane_in_flight", "gauge", "The lane's calls in flight."},
	{"governor_lane_held", "gauge", "The lane's calls in flight that wait in their slots for a provider's request or token budget before they are sent."},
	{"governor_lane_queued", "gauge", "The lane's calls waiting in its queue."},
	{"governor_lane_paused", "gauge", "1 while the lane's dispatches are paused by a provider's Retry-After (here, or at another Governor on a coordinated lane)."},
	{"governor_lane_tenants", "gauge", "Tenants (X-Governor-Tenant) with calls waiting or in flight in the lane."},
	{"governor_lane_conn_limited", "gauge", "1 while the lane's calls wait for a connection to its upstream (GOVERNOR_MAX_CONNS_PER_UPSTREAM)."},
	{"governor_lane_overloaded_total", "counter", "The lane's attempts refused as overloaded (529, or a stream ended by overloaded_error): the provider is short of capacity, not the account of budget. governor_attempts_total counts them as rate_limited."},
	{"governor_lane_decreases_total", "counter", "Times the lane's controller lowered its target."},
	{"governor_lane_decreases_by_cause_total", "counter", "Cuts of the lane's limit by cause: rate_limited (a 429 naming no exhausted budget), overloaded (529), request_budget, token_budget (a 429 whose report showed that budget exhausted), timeout, latency (calls slowed as the limit rose), yield (room given back to other clients of the provider), other_governor (another Governor's decrease of a coordinated lane). Collapses are counted under their cause too."},
	{"governor_lane_refused_total", "counter", "Calls of the lane Governor turned away before they reached the provider, by code: queue_full (its queue held GOVERNOR_QUEUE_CAPACITY calls), queue_timeout (they waited past GOVERNOR_QUEUE_TIMEOUT); governor_errors_total counts them too."},
	{"governor_lane_collapses_total", "counter", "Times the lane's controller collapsed its target to 1."},
	{"governor_lane_pauses_total", "counter", "Times a provider's Retry-After paused the lane."},
	{"governor_lane_budget_per_minute", "gauge", "A provider budget the lane knows, by kind (requests, tokens, input_tokens, output_tokens), per minute as last reported; no series until the provider reports it."},
	{"governor_lane_budget_remaining", "gauge", "Governor's estimate of what is left now of the lane's share of that budget, by kind; calls wait in their slots (governor_lane_held) when a call's cost exceeds it; below 0 it counts the calls booked ahead of the refill."},
	{"governor_lane_budget_share", "gauge", "The share of that budget the lane takes as its own, by kind: 1 unless its calls were refused for want of it (others spend the same budget) or other Governors share the lane."},
	{"governor_lane_tokens_total", "counter", "Tokens the provider reported in usage, by lane and kind (prompt, completion); streams included."},
	{"governor_lanes_evicted_total", "counter", "Lanes removed (their key refused, or idle), with their series, to make room past GOVERNOR_MAX_LANES."},
	{"governor_queue_wait_seconds", "histogram", "Each attempt's wait before it was sent: in the lane's queue, then in its slot for a provider's budget (what X-Governor-Queue-Ms adds up)."},
	{"governor_lane_budget_wait_seconds", "histogram", "The waits in governor_queue_wait_seconds spent in a slot for a provider's request or token budget (governor_lane_held counts the calls waiting so)."},
	{"governor_lane_upstream_latency_seconds", "histogram", "The lane's upstream attempts: request handed to a connection to response headers (a wait for a free connection excluded: see governor_upstream_latency_seconds, governor_lane_conn_limited)."},
	{"governor_batches_total", "counter", "Batches accepted, by mode (sync, progress, async)."},
	{"governor_batches_rejected_total", "counter", "Batches refused whole (malformed, too large, too many jobs)."},
	{"governor_batch_items_total", "counter", "Batch items finished, by status (COMPLETED, COMPLETED_WITH_RETRIES, FAILED, DID_NOT_RUN), counted as each one ends."},
	{"governor_batch_items_pending", "gauge", "Items of the batches under way (async jobs running, sync batches) that have not finished."},
	{"governor_batch_jobs", "gauge", "Async batch jobs held, by state (running, finished)."},
	{"governor_batch_results_memory_bytes", "gauge", "Answer bytes batches hold in memory (async jobs without GOVERNOR_BATCH_DIR, sync batches until their answer is written), at most GOVERNOR_BATCH_MAX_RESULT_BYTES."},
	{"governor_redis_up", "gauge", "1 while coordinated through Redis, 0 while governing locally."},
	{"governor_redis_fallbacks_total", "counter", "Switches from Redis coordination to local governing."},
	{"governor_redis_errors_total", "counter", "Redis commands that failed or timed out, the pings that find Redis still down included."},
	{"governor_redis_sync_seconds", "histogram", "One sync of every lane with Redis (one pipelined round trip)."},
}

// familyOf returns the description of the family a sample belongs to, or
// nil for a metric Governor does not describe (the Go runtime's and the
// process's).
func familyOf(sample string, byName map[string]*metricFamily) *metricFamily {
	if f := byName[sample]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(sample, suffix); ok {
			if f := byName[base]; f != nil && f.kind == "histogram" {
				return f
			}
		}
	}
	return nil
}

// writeMetrics writes set in Prometheus text format with a # HELP and a
// # TYPE line before each of Governor's families, then the process's
// metrics.
func writeMetrics(w io.Writer, set *metrics.Set) {
	byName := make(map[string]*metricFamily, len(metricFamilies))
	for i := range metricFamilies {
		byName[metricFamilies[i].name] = &metricFamilies[i]
	}
	var in bytes.Buffer
	set.WritePrometheus(&in)
	out := make([]byte, 0, in.Len()+len(metricFamilies)*160)
	var prev *metricFamily
	for line := range bytes.Lines(in.Bytes()) {
		if bytes.HasPrefix(line, []byte("# ")) {
			// The metrics package's own metadata (bare HELP lines), when
			// it writes any: Governor's families get theirs below.
			if f := strings.Fields(string(line)); len(f) >= 3 && byName[f[2]] != nil {
				continue
			}
			out = append(out, line...)
			continue
		}
		name := line
		if i := bytes.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if f := familyOf(string(name), byName); f != nil && f != prev {
			out = append(out, "# HELP "...)
			out = append(out, f.name...)
			out = append(out, ' ')
			out = append(out, f.help...)
			out = append(out, "\n# TYPE "...)
			out = append(out, f.name...)
			out = append(out, ' ')
			out = append(out, f.kind...)
			out = append(out, '\n')
			prev = f
		}
		out = append(out, line...)
	}
	_, _ = w.Write(out)
	metrics.WriteProcessMetrics(w)
}
