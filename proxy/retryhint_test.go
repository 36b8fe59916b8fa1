package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/mockllm"
)

// A provider's retry hint passed back with an answer Governor gave up on
// is at most 60 s, in both headers; a shorter one, or one Governor cannot
// read, is passed back as sent.
func TestGivenUpAnswersCapRetryHintsAt60s(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, Config{Upstream: mustURL(t, mockURL), MaxPause: time.Millisecond})
	c := client(t)
	for i, tc := range []struct{ retryAfter, retryAfterMs, wantAfter, wantMs string }{
		{"3600", "3600000", "60", "60000"},
		{"86400", "", "60", ""},
		{"60.5", "60001", "60", "60000"},
		{"1e308", "1e308", "60", "60000"},
		{"Fri, 31 Dec 9999 23:59:59 GMT", "", "60", ""},
		{"30", "30000", "30", "30000"},
		{"60", "60000", "60", "60000"},
		{"soon", "later", "soon", "later"},
	} {
		resp, body := chat(t, c, base, map[string]string{"Authorization": fmt.Sprintf("Bearer key-%d", i),
			"X-Mock-Fault": "429", mockllm.HeaderRetryAfter: tc.retryAfter, mockllm.HeaderRetryAfterMs: tc.retryAfterMs,
			HeaderMaxRetries: "0"})
		assert.Equal(t, 429, resp.StatusCode, "%+v: %s", tc, body)
		assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus), "%+v", tc)
		assert.Equal(t, tc.wantAfter, resp.Header.Get("Retry-After"), "%+v", tc)
		assert.Equal(t, tc.wantMs, resp.Header.Get("Retry-After-Ms"), "%+v", tc)
	}
}

// A date as Retry-After is read at the instant given.
func TestCapRetryHintsReadsADateAtNow(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{59 * time.Second, now.Add(59 * time.Second).Format(http.TimeFormat)},
		{61 * time.Second, "60"},
		{-time.Hour, now.Add(-time.Hour).Format(http.TimeFormat)},
	} {
		var h fasthttp.ResponseHeader
		h.Set("Retry-After", now.Add(tc.in).Format(http.TimeFormat))
		capRetryHints(&h, now)
		assert.Equal(t, tc.want, string(h.Peek("Retry-After")), "a date %s from now", tc.in)
	}
}
