package proxy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ms, secs string
		want     time.Duration
	}{
		{"", "", 0},
		{"1500", "", 1500 * time.Millisecond},
		{"250.5", "9", 250500 * time.Microsecond},
		{"", "2", 2 * time.Second},
		{"", "0.5", 500 * time.Millisecond},
		{"", "Sun, 22 Nov 2026 12:00:30 GMT", 30 * time.Second},
		{"", "Sun, 22 Nov 2026 11:00:00 GMT", 0}, // in the past
		{"-5", "3", 3 * time.Second},             // nonsense ms ignored
		{"abc", "", 0},
		{"", "-1", 0},
		{"", "NaN", 0},
		{"", "1e300", maxHint},
		{"1e300", "", maxHint},
		{"", "soon", 0},
	} {
		var h fasthttp.ResponseHeader
		if tc.ms != "" {
			h.Set("Retry-After-Ms", tc.ms)
		}
		if tc.secs != "" {
			h.Set("Retry-After", tc.secs)
		}
		assert.Equal(t, tc.want, retryAfter(&h, now), "retry-after-ms=%q retry-after=%q", tc.ms, tc.secs)
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "1.5", "-1", "Sun, 22 Nov 2026 12:00:30 GMT", "1e309", "NaN", "+Inf", " 3 ", ""} {
		f.Add(s, s)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ms, secs string) {
		var h fasthttp.ResponseHeader
		h.Set("Retry-After-Ms", ms)
		h.Set("Retry-After", secs)
		d := retryAfter(&h, now)
		if d < 0 || d > maxHint {
			t.Fatalf("retry-after-ms=%q retry-after=%q gave %v", ms, secs, d)
		}
	})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   lane.Outcome
	}{
		{200, "", lane.Answered},
		{400, `{"error":{"code":"invalid"}}`, lane.Answered},
		{404, "", lane.Answered},
		{429, `{"error":{"code":"rate_limit_exceeded"}}`, lane.RateLimited},
		{429, `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`, lane.Quota},
		{429, `{"error":{"code":"enforced_spend_limit_reached"}}`, lane.Quota},
		{529, `{"type":"error","error":{"type":"overloaded_error"}}`, lane.RateLimited},
		{500, "", lane.ServerError},
		{502, "", lane.ServerError},
		{503, "", lane.ServerError},
		{504, "", lane.ServerError},
		{501, "", lane.Answered},
	} {
		assert.Equal(t, tc.want, classifyStatus(tc.status, []byte(tc.body)), "%d %s", tc.status, tc.body)
	}
	assert.Equal(t, lane.Timeout, classifyErr(fasthttp.ErrTimeout))
	assert.Equal(t, lane.ConnError, classifyErr(errors.New("connection refused")))
}

func TestAttemptError(t *testing.T) {
	assert.Equal(t, "429 rate_limit_exceeded",
		attemptError(lane.RateLimited, 429, []byte(`{"error":{"code":"rate_limit_exceeded"}}`), nil, 0))
	assert.Equal(t, "529 overloaded_error",
		attemptError(lane.RateLimited, 529, []byte(`{"type":"error","error":{"type":"overloaded_error"}}`), nil, 0))
	assert.Equal(t, "500 Internal Server Error", attemptError(lane.ServerError, 500, nil, nil, 0))
	assert.Equal(t, "timeout after 30s", attemptError(lane.Timeout, 0, nil, fasthttp.ErrTimeout, 30*time.Second))
}

func TestMaxRetriesHeader(t *testing.T) {
	for in, want := range map[string]int{"": 10, "3": 3, "0": 0, "100": MaxRetriesCeiling} {
		n, err := maxRetriesOf([]byte(in), 10)
		assert.NoError(t, err, in)
		assert.Equal(t, want, n, in)
	}
	for _, in := range []string{"-1", "x", "101", "1000", "99999999999999999999", "1.5", "0x10", " 2"} {
		_, err := maxRetriesOf([]byte(in), 10)
		assert.ErrorContains(t, err, "X-Governor-Max-Retries: want a whole number of retries from 0 to 100", in)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "text/event-stream; charset=utf-8": true, " Text/Event-Stream ;x=y": true,
		"text/event-streams": false, "application/json": false, "": false, "text/event-stream-x;": false,
	} {
		assert.Equal(t, want, isEventStream([]byte(ct)), ct)
	}
}
