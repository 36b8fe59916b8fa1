package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anthropicOverloadEvent is the event Anthropic ends a stream with when it
// is overloaded after the answer began.
const anthropicOverloadEvent = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

// The watch finds an overload error event however the stream is cut into
// reads, and nothing else.
func TestOverloadWatchFindsTheOverloadEvent(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a \\\"type\\\":\\\"overloaded_error\\\" \\\"error\\\" in the text\"}}\n\n"
	for _, tc := range []struct {
		name, stream string
		want         bool
	}{
		{"overloaded mid-stream", start + anthropicOverloadEvent, true},
		{"CRLF lines, spaces in the JSON", strings.ReplaceAll(start+"event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n", "\n", "\r\n"), true},
		{"no event line", start + "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", true},
		{"a stream that completes", start + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", false},
		{"another error", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal\"}}\n\n", false},
		{"the words in the answer's text", start, false},
		{"a line longer than the bound", "data: {\"error\":{\"type\":\"overloaded_error\"},\"pad\":\"" + strings.Repeat("x", maxEventLine) + "\"}\n\n", false},
	} {
		for _, size := range []int{1, 2, 7, 64, len(tc.stream)} {
			var w overloadWatch
			for s := tc.stream; s != ""; {
				n := min(size, len(s))
				w.write([]byte(s[:n]))
				s = s[n:]
			}
			assert.Equal(t, tc.want, w.seen, "%s, reads of %d bytes", tc.name, size)
			assert.LessOrEqual(t, cap(w.line), 2*maxEventLine, "%s: the line kept is bounded", tc.name)
		}
	}
}

// An overloaded_error event that ends a stream begun with a 200 reaches
// the lane's controller as a 529 would: the limit comes down. The client
// gets the stream as the provider sent it. A stream that ends well leaves
// the limit.
func TestStreamOverloadLowersTheLimit(t *testing.T) {
	checkLeaks(t)
	for _, overloaded := range []bool{false, true} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n")
			w.(http.Flusher).Flush()
			if overloaded {
				_, _ = io.WriteString(w, anthropicOverloadEvent)
			} else {
				_, _ = io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			}
		}))
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
		c := client(t)
		req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{"model":"claude-test","stream":true}`))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, overloaded, strings.Contains(string(body), "overloaded_error"), "the stream passes unchanged")

		if overloaded {
			// The stream's end is told to the lane once fasthttp has
			// written it and closed it, just after the client has read it.
			require.Eventually(t, func() bool {
				l := lanesOf(t, c, base)
				return len(l) == 1 && l[0].InFlight == 0 && l[0].Decreases+l[0].Collapses == 1
			}, 10*time.Second, time.Millisecond, "the overload lowered the limit")
			assert.Equal(t, "rate_limited", lanesOf(t, c, base)[0].LastDecreaseReason)
		} else {
			require.Eventually(t, func() bool {
				l := lanesOf(t, c, base)
				return len(l) == 1 && l[0].InFlight == 0
			}, 10*time.Second, time.Millisecond)
			l := lanesOf(t, c, base)[0]
			assert.Zero(t, l.Decreases+l.Collapses, "a stream that ends well lowers nothing")
		}
		up.Close()
	}
}

// A streamed answer that Do reads whole (a batch item's) tells the lane of
// an overload error that ended it, as a stream passed on does.
func TestStreamReadWholeOverloadLowersTheLimit(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"+anthropicOverloadEvent)
	}))
	defer up.Close()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
	res := p.Do(context.Background(), &Call{Path: "/v1/messages", Body: []byte(`{"model":"claude-test","stream":true}`)})
	require.Nil(t, res.Err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(res.Body), "overloaded_error", "the answer is kept as sent")
	l := lanesOf(t, client(t), base)
	require.Len(t, l, 1)
	assert.EqualValues(t, 1, l[0].Decreases+l[0].Collapses, "the overload lowered the limit")
	assert.Equal(t, "rate_limited", l[0].LastDecreaseReason)
}
