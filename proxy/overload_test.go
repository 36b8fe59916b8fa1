package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
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
			assert.EqualValues(t, 1, lanesOf(t, c, base)[0].Overloaded, "counted as the provider overloaded")
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

// A stream passed on to its client is one attempt with one outcome, which
// the lane's controller hears when the stream ends, as it hears an answer
// read whole: a stream ended by an overloaded_error is a 529 and nothing
// else (no success heard first), and one that ends well is a success
// whose latency runs to its end. The provider takes 1 s (on Governor's
// clock) to the stream's first event, and 5 s more to its last.
func TestStreamIsHeardOnceWhenItEnds(t *testing.T) {
	checkLeaks(t)
	for _, overloaded := range []bool{false, true} {
		t.Run(fmt.Sprintf("overloaded=%v", overloaded), func(t *testing.T) {
			clock := newManualClock()
			more := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				clock.Advance(time.Second) // to the stream's first byte
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n")
				w.(http.Flusher).Flush()
				<-more
				if overloaded {
					_, _ = io.WriteString(w, anthropicOverloadEvent)
				} else {
					_, _ = io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
				}
			}))
			defer up.Close()
			set := newSet()
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Metrics: set, Now: clock.Now}))
			c := client(t)
			req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{"model":"claude-test","stream":true}`))
			require.NoError(t, err)
			resp, err := c.Do(req)
			require.NoError(t, err)
			first := make([]byte, len("event: message_start\n"))
			_, err = io.ReadFull(resp.Body, first)
			require.NoError(t, err, "the stream's first event reached the client")
			clock.Advance(5 * time.Second)
			close(more)
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				l := lanesOf(t, c, base)
				return len(l) == 1 && l[0].InFlight == 0
			}, 10*time.Second, time.Millisecond, "the stream ended")

			l := lanesOf(t, c, base)[0]
			text := promText(set)
			attempts := func(outcome string) string {
				return sampleOf(text, fmt.Sprintf(`governor_attempts_total{lane=%q,outcome=%q}`, l.ID, outcome))
			}
			if overloaded {
				assert.Equal(t, "0", attempts("answered"), "no success counted")
				assert.Equal(t, "1", attempts("rate_limited"), "one overload counted")
				assert.Zero(t, l.LatencyEWMAMs, "the controller heard no success: %+v", l)
				assert.Equal(t, "rate_limited", l.LastDecreaseReason)
				assert.EqualValues(t, 1, l.Overloaded)
			} else {
				assert.Equal(t, "1", attempts("answered"))
				assert.Equal(t, "0", attempts("rate_limited"))
				assert.InDelta(t, 6000, l.LatencyEWMAMs, 1, "the success is heard at the stream's end: %+v", l)
				assert.Zero(t, l.Decreases+l.Collapses)
			}
		})
	}
}

// A streamed answer that Do reads whole (a batch item's) is read inside
// its attempt: a stream the provider ended with an error event (Anthropic's
// overloaded_error, OpenAI's server_error) is a failed attempt, retried
// within the call's budget and listed in its errors, and the controller
// hears an overload once, as a 529.
func TestCallStreamEndedByAnErrorIsRetried(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		path, body, wantErr, wantEnd, outcome string
		decreases                             int
	}{
		{"/v1/messages", `{"model":"claude-test","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"200 stream ended by overloaded_error", "event: message_stop", "rate_limited", 1},
		{"/v1/chat/completions", `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"200 stream ended by server_error", `"finish_reason":"stop"`, "server_error", 0},
	} {
		mock, url := startMock(t, mockllm.Config{})
		set := newSet()
		p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, url), Metrics: set}))
		id := "overloaded" + tc.path
		res := p.Do(context.Background(), &Call{Path: tc.path, Body: []byte(tc.body), MaxRetries: 3,
			Header: map[string]string{mockllm.HeaderFault: "overload-mid-stream,ok", mockllm.HeaderRequestID: id}})
		require.Nil(t, res.Err, tc.path)
		assert.Equal(t, http.StatusOK, res.StatusCode, tc.path)
		assert.Equal(t, StatusCompletedWithRetries, res.Details.Status, tc.path)
		assert.Equal(t, 2, res.Details.Attempts, tc.path)
		assert.Equal(t, []string{tc.wantErr}, res.Details.Errors, tc.path)
		assert.Contains(t, string(res.Body), tc.wantEnd, "%s: the answer is the whole stream of the retry", tc.path)
		assert.NotContains(t, string(res.Body), `"error"`, tc.path)
		assert.EqualValues(t, 2, mock.Stats().ByRequestID[id], "%s: the provider saw each attempt once", tc.path)

		l := lanesOf(t, client(t), base)
		require.Len(t, l, 1)
		assert.Zero(t, l[0].InFlight, tc.path)
		assert.EqualValues(t, tc.decreases, l[0].Decreases+l[0].Collapses, "%s: an overload lowers the limit", tc.path)
		prom := promText(set)
		for outcome, want := range map[string]int{"answered": 1, tc.outcome: 1} {
			assert.Contains(t, prom, fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q} %d\n", l[0].ID, outcome, want), tc.path)
		}
	}
}

// A Call whose stream ends in an error on every attempt spends its budget
// and comes back FAILED with the provider's last answer, as a call answered
// 529 every time does.
func TestCallStreamAlwaysOverloadedSpendsItsBudget(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"+anthropicOverloadEvent)
	}))
	defer up.Close()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
	res := p.Do(context.Background(), &Call{Path: "/v1/messages", Body: []byte(`{"model":"claude-test","stream":true}`), MaxRetries: 2})
	require.Nil(t, res.Err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, StatusFailed, res.Details.Status)
	assert.Equal(t, 3, res.Details.Attempts, "the first attempt and 2 retries")
	assert.Equal(t, []string{"200 stream ended by overloaded_error", "200 stream ended by overloaded_error", "200 stream ended by overloaded_error"}, res.Details.Errors)
	assert.Contains(t, string(res.Body), "overloaded_error", "the provider's last answer, as sent")
	l := lanesOf(t, client(t), base)
	require.Len(t, l, 1)
	assert.Zero(t, l[0].InFlight)
	assert.NotZero(t, l[0].Decreases+l[0].Collapses, "the overloads lowered the limit")
	assert.Equal(t, "rate_limited", l[0].LastDecreaseReason)
	assert.EqualValues(t, 3, l[0].Overloaded, "each attempt counted as the provider overloaded")
}

// A stream that Do reads whole and that stops before its last event
// (Anthropic's message_stop, OpenAI's [DONE]), however cleanly its bytes
// end, was cut: the attempt is retried as a connection error. A stream of
// a shape the watch does not know ends where its bytes end; one that
// carried only keep-alives ended before its first event.
func TestCallStreamCutBeforeItsLastEventIsRetried(t *testing.T) {
	checkLeaks(t)
	const (
		cutWhy   = "stream cut before its last event"
		firstWhy = "stream ended before its first event"
	)
	for _, tc := range []struct {
		name, whole, cut string
		why              string // the retried attempt's error
	}{
		{"anthropic", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			"event: message_start\ndata: {\"type\":\"message_start\"}\n\n", cutWhy},
		{"openai", "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\ndata: [DONE]\n\n",
			"data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n", cutWhy},
		{"closed right after its headers", "data: one\n\n", "", firstWhy},
		{"closed after keep-alives only", "data: one\n\n", ": keep-alive\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n", firstWhy},
		{"unknown shape", "data: one\n\n", "data: one\n\n", ""},
	} {
		var n atomic.Int32
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			if n.Add(1) == 1 {
				_, _ = io.WriteString(w, tc.cut) // a clean end of the bytes: the last chunk
				return
			}
			_, _ = io.WriteString(w, tc.whole)
		}))
		p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
		res := p.Do(context.Background(), &Call{Path: "/v1/messages", Body: []byte(`{"stream":true}`), MaxRetries: 3})
		require.Nil(t, res.Err, tc.name)
		if tc.why == "" {
			assert.Equal(t, StatusCompleted, res.Details.Status, tc.name)
			assert.Equal(t, tc.cut, string(res.Body), tc.name)
			up.Close()
			continue
		}
		assert.Equal(t, StatusCompletedWithRetries, res.Details.Status, tc.name)
		assert.Equal(t, []string{"200 " + tc.why}, res.Details.Errors, tc.name)
		assert.Equal(t, tc.whole, string(res.Body), tc.name)
		up.Close()
	}
}

// A stream that Do reads whole is limited on each silence, not on the
// whole: one longer than GOVERNOR_STREAM_IDLE_TIMEOUT but never idle that
// long completes.
func TestCallStreamLongerThanTheIdleTimeoutCompletes(t *testing.T) {
	checkLeaks(t)
	const events = 12
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			_, _ = io.WriteString(w, "data: {\"object\":\"chat.completion.chunk\",\"n\":"+strconv.Itoa(i)+"}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond) // the trickle itself
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	// The stream takes 600 ms, the idle timeout is 400 ms, each gap 50 ms.
	p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: 400 * time.Millisecond}))
	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`), MaxRetries: 0})
	require.Nil(t, res.Err, "%+v", res.Err)
	assert.Equal(t, StatusCompleted, res.Details.Status, "%v", res.Details.Errors)
	assert.Equal(t, events+1, strings.Count(string(res.Body), "data: "), "the whole stream")
}

// However a provider's stream is cut into reads, the watch comes to the
// same verdict as from one read, and keeps a bounded line (longer in an
// error event, whose data may carry the whole response).
func FuzzOverloadWatch(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {}\n\n"+anthropicOverloadEvent), uint8(3))
	f.Add([]byte("data: {\"object\":\"chat.completion.chunk\"}\n\ndata: {\"error\":{\"type\":\"server_error\"}}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Add([]byte("data: {\"error\":null}\r\n\r\n"), uint8(7))
	f.Add([]byte("data: "+strings.Repeat("x", 2*maxEventLine)+"\n\n"), uint8(64))
	f.Add([]byte("event: response.failed\ndata: {\"response\":{\"instructions\":\""+strings.Repeat("x", 4*maxEventLine)+"\",\"error\":{\"code\":\"server_error\"}}}\n\n"), uint8(61))
	f.Fuzz(func(t *testing.T, stream []byte, size uint8) {
		var whole, cut overloadWatch
		whole.write(stream)
		whole.write(lineEnd)
		n := int(size)%64 + 1
		for s := stream; len(s) > 0; {
			k := min(n, len(s))
			cut.write(s[:k])
			s = s[k:]
		}
		cut.write(lineEnd)
		wo, wwhy := whole.outcome()
		co, cwhy := cut.outcome()
		if wo != co || wwhy != cwhy || whole.seen != cut.seen {
			t.Fatalf("reads of %d bytes: %v %q, one read: %v %q", n, co, cwhy, wo, wwhy)
		}
		// A line is kept up to maxEventLine, or maxErrorEventLine in an
		// event named error or response.failed.
		bound := maxEventLine
		if bytes.Contains(stream, []byte("error")) || bytes.Contains(stream, []byte("response.failed")) {
			bound = maxErrorEventLine
		}
		if cap(cut.line) > 2*bound {
			t.Fatalf("kept %d bytes of a line (bound %d)", cap(cut.line), bound)
		}
	})
}

// A stream that Do reads whole and that goes silent once begun is ended
// after GOVERNOR_STREAM_IDLE_TIMEOUT and retried as a cut, with the
// silence in its errors: the provider answered in time, so the controller
// hears no timeout, as for a stream passed on.
func TestCallStreamSilentOnceBegunIsRetried(t *testing.T) {
	checkLeaks(t)
	const whole = "data: {\"object\":\"chat.completion.chunk\"}\n\ndata: [DONE]\n\n"
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1) == 1 {
			_, _ = io.WriteString(w, "data: {\"object\":\"chat.completion.chunk\"}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // silent until Governor gives up
			return
		}
		_, _ = io.WriteString(w, whole)
	}))
	defer up.Close()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: 200 * time.Millisecond, AttemptTimeout: time.Hour}))
	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`), MaxRetries: 2})
	require.Nil(t, res.Err, "%+v", res.Err)
	assert.Equal(t, StatusCompletedWithRetries, res.Details.Status)
	assert.Equal(t, []string{"200 stream silent for 200ms"}, res.Details.Errors)
	assert.Equal(t, whole, string(res.Body))
	l := lanesOf(t, client(t), base)
	require.Len(t, l, 1)
	assert.Zero(t, l[0].Decreases+l[0].Collapses, "no congestion signal")
}

// What a stream read whole comes to, as an attempt, for each provider's
// way of ending one.
func TestStreamVerdicts(t *testing.T) {
	const (
		chat      = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n"
		messages  = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
		responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"error\":null}}\n\n"
	)
	for _, tc := range []struct {
		name, stream string
		want         lane.Outcome
		why          string
	}{
		{"chat, whole", chat + "data: [DONE]\n\n", lane.Answered, ""},
		{"chat, server_error then [DONE]", chat + "data: {\"error\":{\"message\":\"x\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n", lane.ServerError, "stream ended by server_error"},
		{"chat, cut", chat, lane.ConnError, "stream cut before its last event"},
		{"messages, whole", messages + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", lane.Answered, ""},
		{"messages, overloaded", messages + anthropicOverloadEvent, lane.RateLimited, "stream ended by overloaded_error"},
		{"messages, api_error", messages + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal\"}}\n\n", lane.ServerError, "stream ended by api_error"},
		{"messages, invalid_request_error: as sent", messages + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\"}}\n\n", lane.Answered, ""},
		{"responses, whole", responses + "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n", lane.Answered, ""},
		{"responses, incomplete", responses + "event: response.incomplete\ndata: {\"type\":\"response.incomplete\"}\n\n", lane.Answered, ""},
		{"responses, error event", responses + "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"x\",\"param\":null,\"sequence_number\":3}\n\n", lane.ServerError, "stream ended by server_error"},
		{"responses, failed", responses + "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n", lane.ServerError, "stream ended by server_error"},
		{"responses, failed for good", responses + "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"invalid_prompt\",\"message\":\"x\"}}}\n\n", lane.Answered, ""},
		{"responses, failed, the whole response in its line", responses + "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"instructions\":\"" + strings.Repeat("be brief. ", 800) + "\",\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n", lane.ServerError, "stream ended by server_error"},
		{"responses, cut", responses, lane.ConnError, "stream cut before its last event"},
		{"unknown shape", "data: one\n\n", lane.Answered, ""},
		{"empty", "", lane.ConnError, "stream ended before its first event"},
		{"keep-alives only", ": keep-alive\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n", lane.ConnError, "stream ended before its first event"},
	} {
		var w overloadWatch
		w.write([]byte(tc.stream))
		w.write(lineEnd)
		o, why := w.outcome()
		assert.Equal(t, tc.want, o, tc.name)
		assert.Equal(t, tc.why, why, tc.name)

		var inPieces overloadWatch // as a stream arrives: a few bytes a read
		for b := []byte(tc.stream); len(b) > 0; {
			n := min(len(b), 61)
			inPieces.write(b[:n])
			b = b[n:]
		}
		inPieces.write(lineEnd)
		o, why = inPieces.outcome()
		assert.Equal(t, tc.want, o, tc.name+", in pieces")
		assert.Equal(t, tc.why, why, tc.name+", in pieces")
	}
}

// Streams that Do reads whole share an upstream's connections with other
// calls: the silence limit a stream read whole puts on its connection ends
// with its exchange, before the connection goes back to the pool, and the
// next exchange on it (another call's, on another goroutine) runs under
// its own deadlines only. Under -race, calls of several lanes reusing each
// other's connections show a silence limit left behind.
func TestCallStreamIdleLimitEndsWithItsExchange(t *testing.T) {
	checkLeaks(t)
	const whole = "data: {\"object\":\"chat.completion.chunk\"}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, whole)
	}))
	defer up.Close()
	p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: time.Minute, AttemptTimeout: time.Hour}))
	const lanes, calls = 4, 25
	var wg sync.WaitGroup
	errs := make(chan string, lanes*calls)
	for i := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m%d","stream":true}`, i)
			for range calls {
				res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(body)})
				if res.Err != nil || string(res.Body) != whole {
					errs <- fmt.Sprintf("%+v %q", res.Err, res.Body)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
