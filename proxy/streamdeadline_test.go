package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stream that Do reads whole (a batch item's) and whose provider keeps
// it open with keep-alive events, never silent and never ended, is ended
// by its attempt's deadline, however long GOVERNOR_STREAM_IDLE_TIMEOUT
// is: the attempt timed out, and the call gets its answer. Anthropic's
// `event: ping` and an SSE comment line alike.
func TestCallStreamKeptAliveForeverEndsAtTheAttemptTimeout(t *testing.T) {
	for _, tc := range []struct{ name, begin, ping string }{
		{"Anthropic ping events", "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
			"event: ping\ndata: {\"type\": \"ping\"}\n\n"},
		{"SSE comment lines", "data: {\"object\":\"chat.completion.chunk\"}\n\n", ": keep-alive\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			var attempts atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				attempts.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tc.begin)
				w.(http.Flusher).Flush()
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-r.Context().Done():
						return
					case <-tick.C:
						if _, err := io.WriteString(w, tc.ping); err != nil {
							return
						}
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer up.Close()
			p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: time.Hour}))
			res := p.Do(context.Background(), &Call{Path: "/v1/messages", Body: []byte(`{"stream":true}`),
				MaxRetries: 1, AttemptTimeout: 300 * time.Millisecond})
			require.NotNil(t, res.Err, "the call failed: %+v", res.Details)
			assert.Equal(t, http.StatusGatewayTimeout, res.Err.Status, "%+v", res.Err)
			assert.Equal(t, StatusFailed, res.Details.Status)
			assert.Equal(t, []string{"timeout after 300ms", "timeout after 300ms"}, res.Details.Errors,
				"each attempt ended by its deadline, and retried")
			assert.EqualValues(t, 2, attempts.Load())
		})
	}
}
