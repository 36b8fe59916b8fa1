package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pingForever answers a stream's first attempt with begin, then ping
// every 10 ms until Governor leaves; later attempts get whole.
func pingForever(t *testing.T, begin, ping, whole string) (url string, attempts *atomic.Int32) {
	t.Helper()
	attempts = new(atomic.Int32)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := attempts.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if n > 1 && whole != "" {
			_, _ = io.WriteString(w, whole)
			return
		}
		_, _ = io.WriteString(w, begin)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				if _, err := io.WriteString(w, ping); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(up.Close)
	return up.URL, attempts
}

// keepAliveCases are the ways providers keep a stream open.
var keepAliveCases = []struct{ name, begin, ping string }{
	{"Anthropic ping events", "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
		"event: ping\ndata: {\"type\": \"ping\"}\n\n"},
	{"SSE comment lines", "data: {\"object\":\"chat.completion.chunk\"}\n\n", ": keep-alive\n\n"},
}

// A stream that Do reads whole (a batch item's) whose provider keeps it
// open with keep-alive events and sends nothing else is silent: nobody
// reads it as it comes, so the events keep nothing alive, and
// GOVERNOR_STREAM_IDLE_TIMEOUT ends it as any silence, retried as a cut.
func TestCallStreamOfKeepAlivesIsSilent(t *testing.T) {
	const whole = "data: {\"object\":\"chat.completion.chunk\"}\n\ndata: [DONE]\n\n"
	for _, tc := range keepAliveCases {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			up, attempts := pingForever(t, tc.begin, tc.ping, whole)
			p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), StreamIdleTimeout: 200 * time.Millisecond, AttemptTimeout: 5 * time.Second}))
			res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`), MaxRetries: 1})
			require.Nil(t, res.Err, "%+v", res.Err)
			assert.Equal(t, StatusCompletedWithRetries, res.Details.Status)
			assert.Equal(t, []string{"200 stream silent for 200ms"}, res.Details.Errors)
			assert.Equal(t, whole, string(res.Body))
			assert.EqualValues(t, 2, attempts.Load())
		})
	}
}

// A stream that Do reads whole (a batch item's) and that carries content
// for longer than its attempt timeout completes in one attempt: the
// attempt timeout bounds the wait for its head (GOVERNOR_ATTEMPT_TIMEOUT,
// a batch's timeout: "until the first byte"), silence bounds it after. A
// long generation is never cut at the timeout and sent again, billed
// twice.
func TestCallStreamLongerThanItsAttemptTimeoutCompletes(t *testing.T) {
	checkLeaks(t)
	const events = 20
	var attempts atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(25 * time.Millisecond) // 20 events: 500 ms at least
		defer tick.Stop()
		for range events {
			if _, err := io.WriteString(w, "data: {\"object\":\"chat.completion.chunk\"}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: 30 * time.Second}))
	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`),
		MaxRetries: 1, AttemptTimeout: 100 * time.Millisecond})
	require.Nil(t, res.Err, "%+v", res.Details)
	assert.Equal(t, StatusCompleted, res.Details.Status, "%+v", res.Details)
	assert.EqualValues(t, 1, attempts.Load(), "sent once")
	assert.Equal(t, events+1, strings.Count(string(res.Body), "data: "), "the whole stream")
}
