package mockllm

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Request headers that steer the simulation of one request.
const (
	HeaderFault        = "X-Mock-Fault"
	HeaderLatency      = "X-Mock-Latency"
	HeaderRetryAfter   = "X-Mock-Retry-After"
	HeaderRetryAfterMs = "X-Mock-Retry-After-Ms"
	HeaderRequestID    = "X-Request-Id"
)

// faultKind is what happens to an admitted request.
type faultKind int

const (
	faultNone faultKind = iota
	// faultStatus answers with an error status.
	faultStatus
	faultReset
	faultHang
	faultResetMidStream
	faultHangMidStream
	// faultPingMidStream keeps a stream open half way with keep-alive
	// events and never ends it (a JSON answer: a hang half way).
	faultPingMidStream
	// faultOverloadMidStream ends a stream half way with the provider's
	// overload error event (a JSON answer: its overload status).
	faultOverloadMidStream
)

type fault struct {
	kind   faultKind
	status int
	quota  bool // 429 insufficient_quota
}

// immediate reports whether the fault is answered without the latency wait:
// rejections at the door come at once, failures while processing after it.
func (f fault) immediate() bool {
	if f.kind == faultHang {
		return true
	}
	if f.kind != faultStatus {
		return false
	}
	switch f.status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return false
	}
	return true
}

// retryHint reports whether X-Mock-Retry-After applies to the fault.
func (f fault) retryHint() bool {
	if f.kind != faultStatus {
		return false
	}
	switch f.status {
	case http.StatusTooManyRequests, statusOverloaded, http.StatusServiceUnavailable:
		return true
	}
	return false
}

var faultNames = map[string]fault{
	"ok":               {kind: faultNone},
	"400":              {kind: faultStatus, status: 400},
	"401":              {kind: faultStatus, status: 401},
	"429":              {kind: faultStatus, status: 429},
	"429-quota":        {kind: faultStatus, status: 429, quota: true},
	"500":              {kind: faultStatus, status: 500},
	"502":              {kind: faultStatus, status: 502},
	"503":              {kind: faultStatus, status: 503},
	"504":              {kind: faultStatus, status: 504},
	"529":              {kind: faultStatus, status: statusOverloaded},
	"reset":            {kind: faultReset},
	"hang":             {kind: faultHang},
	"reset-mid-stream": {kind: faultResetMidStream},
	"hang-mid-stream":  {kind: faultHangMidStream},
	"ping-mid-stream":  {kind: faultPingMidStream},

	"overload-mid-stream": {kind: faultOverloadMidStream},
}

// mockHeaders are the X-Mock-* settings of one request.
type mockHeaders struct {
	forced       bool // the fault comes from X-Mock-Fault, not from chance
	fault        fault
	latency      time.Duration
	latencySet   bool
	retryAfter   string
	retryAfterMs string
}

// parseMock reads the X-Mock-* headers. attempt is the number of times the
// request's id has been seen, 0 when it has none. Every entry of
// X-Mock-Fault is checked, so a typo fails the first attempt rather than a
// later one.
func parseMock(h http.Header, attempt int64) (mockHeaders, error) {
	var m mockHeaders
	if v := h.Get(HeaderFault); v != "" {
		entries := strings.Split(v, ",")
		for _, e := range entries {
			if _, ok := faultNames[strings.ToLower(strings.TrimSpace(e))]; !ok {
				return m, fmt.Errorf("%s: unknown fault %q (want ok, 400, 401, 429, 429-quota, 500, 502, 503, 504, 529, reset, hang, reset-mid-stream, hang-mid-stream or overload-mid-stream)", HeaderFault, strings.TrimSpace(e))
			}
		}
		i := int64(0)
		if attempt > 0 {
			i = attempt - 1
		}
		if i < int64(len(entries)) {
			m.forced = true
			m.fault = faultNames[strings.ToLower(strings.TrimSpace(entries[i]))]
		}
	}
	if v := h.Get(HeaderLatency); v != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return m, fmt.Errorf("%s: want a duration such as 250ms, got %q", HeaderLatency, v)
		}
		m.latency, m.latencySet = d, true
	}
	m.retryAfter = h.Get(HeaderRetryAfter)
	m.retryAfterMs = h.Get(HeaderRetryAfterMs)
	return m, nil
}

// randomFault draws a fault from the configured probabilities with u, a
// uniform number in [0, 1).
func randomFault(f Faults, u float64) fault {
	switch {
	case u < f.Error500:
		return fault{kind: faultStatus, status: http.StatusInternalServerError}
	case u < f.Error500+f.Overloaded529:
		return fault{kind: faultStatus, status: statusOverloaded}
	case u < f.Error500+f.Overloaded529+f.Reset:
		return fault{kind: faultReset}
	case u < f.Error500+f.Overloaded529+f.Reset+f.Hang:
		return fault{kind: faultHang}
	case u < f.Error500+f.Overloaded529+f.Reset+f.Hang+f.OverloadedMidStream:
		return fault{kind: faultOverloadMidStream}
	}
	return fault{}
}
