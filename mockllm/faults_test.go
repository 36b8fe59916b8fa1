package mockllm_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/mockllm"
)

func TestFaultSequencePerRequestID(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	attempt := func(id string) int {
		return serve(s, http.MethodPost, "/v1/chat/completions", chatBody,
			"X-Mock-Fault", "429, 500,ok,529", "X-Request-Id", id).Code
	}
	for i, want := range []int{429, 500, 200, 529, 200, 200} {
		assert.Equal(t, want, attempt("item-7"), "item-7 attempt %d", i+1)
	}
	assert.Equal(t, 429, attempt("item-8"), "another id starts its own sequence")

	// Without an id the first entry applies to every request.
	for i := range 3 {
		assert.Equal(t, 503, serve(s, http.MethodPost, "/v1/chat/completions", chatBody, "X-Mock-Fault", "503,ok").Code, "request %d", i)
	}

	st := s.Stats()
	assert.Equal(t, map[string]int64{"item-7": 6, "item-8": 1}, st.ByRequestID)
	assert.Equal(t, int64(10), st.Received)
	assert.Equal(t, map[int]int64{200: 3, 429: 2, 500: 1, 503: 3, 529: 1}, st.Answered)
	assert.Equal(t, int64(2), st.RateLimited)
}

func TestForcedStatusBodies(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	for _, tc := range []struct {
		fault      string
		status     int
		typ, code  string
		anthropic  string
		retryHints bool
	}{
		{"400", 400, "invalid_request_error", "invalid_request", "invalid_request_error", false},
		{"401", 401, "invalid_request_error", "invalid_api_key", "authentication_error", false},
		{"429", 429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error", true},
		{"429-quota", 429, "insufficient_quota", "insufficient_quota", "rate_limit_error", true},
		{"500", 500, "server_error", "server_error", "api_error", false},
		{"502", 502, "server_error", "bad_gateway", "api_error", false},
		{"503", 503, "server_error", "service_unavailable", "api_error", true},
		{"504", 504, "server_error", "gateway_timeout", "timeout_error", false},
	} {
		hdr := []string{"X-Mock-Fault", tc.fault, "X-Mock-Retry-After", "7", "X-Mock-Retry-After-Ms", "6500"}
		w := serve(s, http.MethodPost, "/v1/chat/completions", chatBody, hdr...)
		require.Equal(t, tc.status, w.Code, tc.fault)
		e := errorOf(t, w)
		assert.Equal(t, tc.typ, e["type"], tc.fault)
		assert.Equal(t, tc.code, e["code"], tc.fault)
		if tc.retryHints {
			assert.Equal(t, "7", w.Header().Get("Retry-After"), tc.fault)
			assert.Equal(t, "6500", w.Header().Get("Retry-After-Ms"), tc.fault)
		} else {
			assert.Empty(t, w.Header().Get("Retry-After"), tc.fault)
		}

		w = serve(s, http.MethodPost, "/v1/messages", messagesBody, hdr...)
		require.Equal(t, tc.status, w.Code, tc.fault)
		m := decode(t, w.Body.Bytes())
		assert.Equal(t, "error", m["type"], tc.fault)
		assert.Equal(t, tc.anthropic, m["error"].(map[string]any)["type"], tc.fault)
	}

	// 529 is Anthropic's overloaded error, in its shape on every route.
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		w := serve(s, http.MethodPost, path, chatBody, "X-Mock-Fault", "529", "X-Mock-Retry-After", "3")
		require.Equal(t, 529, w.Code, path)
		assert.Equal(t, "3", w.Header().Get("Retry-After"), path)
		m := decode(t, w.Body.Bytes())
		assert.Equal(t, "error", m["type"], path)
		assert.Equal(t, "overloaded_error", m["error"].(map[string]any)["type"], path)
	}

	// Without X-Mock-Retry-After a forced fault carries no hint.
	assert.Empty(t, serve(s, http.MethodPost, "/v1/chat/completions", chatBody, "X-Mock-Fault", "429").Header().Get("Retry-After"))
}

func TestRandomFaults(t *testing.T) {
	for _, tc := range []struct {
		faults mockllm.Faults
		status int
	}{
		{mockllm.Faults{Error500: 1}, 500},
		{mockllm.Faults{Overloaded529: 1}, 529},
	} {
		s := mockllm.New(mockllm.Config{Faults: tc.faults, Seed: 1})
		for range 5 {
			assert.Equal(t, tc.status, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code, "%+v", tc.faults)
		}
		assert.Equal(t, 200, serve(s, http.MethodPost, "/v1/chat/completions", chatBody, "X-Mock-Fault", "ok").Code, "ok overrides random faults")
		s.Close()
	}

	s := mockllm.New(mockllm.Config{Faults: mockllm.Faults{Error500: 0.3}, Seed: 42})
	defer s.Close()
	const n = 2000
	for range n {
		serve(s, http.MethodPost, "/v1/embeddings", `{"input":"x"}`)
	}
	got := s.Stats().Answered[500]
	assert.InDelta(t, 0.3*n, float64(got), 0.05*n, "500s out of %d", n)
}

func TestResetGivesConnectionError(t *testing.T) {
	s, url, c := start(t, mockllm.Config{})
	_, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatBody, "X-Mock-Fault", "reset"))
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNRESET, "a TCP reset")

	st := s.Stats()
	assert.Equal(t, int64(1), st.Resets)
	assert.Empty(t, st.Answered, "a reset is no answer")
	assert.Equal(t, 0, st.InFlight)

	// The next request on a fresh connection is answered.
	resp, _ := post(t, c, url+"/v1/chat/completions", chatBody)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestResetMidStream(t *testing.T) {
	for _, body := range []string{chatStreamBody, chatBody} {
		s, url, c := start(t, mockllm.Config{})
		resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", body, "X-Mock-Fault", "reset-mid-stream"))
		require.NoError(t, err, "the answer starts")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Error(t, err, "then breaks: %s", got)
		assert.ErrorIs(t, err, syscall.ECONNRESET, "a TCP reset")
		assert.NotEmpty(t, got, "part of the answer arrived")
		assert.NotContains(t, string(got), "[DONE]")

		st := s.Stats()
		assert.Equal(t, int64(1), st.Resets)
		if body == chatStreamBody {
			assert.Equal(t, int64(1), st.StreamsStarted)
			assert.Equal(t, int64(1), st.StreamsAborted)
			assert.Equal(t, int64(0), st.StreamsCompleted)
		}
	}
}

func TestHangEndsWhenClientLeaves(t *testing.T) {
	s, url, c := start(t, mockllm.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatBody, "X-Mock-Fault", "hang").WithContext(ctx))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.Stats().Hangs == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1, s.Stats().InFlight, "a hung request is in flight")

	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.ClientGone == 1 && st.InFlight == 0
	}, 5*time.Second, time.Millisecond, "the server notices the client left")
	assert.Empty(t, s.Stats().Answered)
}

func TestClientLeavesDuringLatency(t *testing.T) {
	s, url, c := start(t, mockllm.Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/messages", messagesBody).WithContext(ctx))
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.Stats().InFlight == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.ClientGone == 1 && st.InFlight == 0
	}, 5*time.Second, time.Millisecond)
}

func TestStreamAbortedWhenClientLeaves(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  mockllm.Config
		hdr  []string
	}{
		{"slow stream", mockllm.Config{ChunkDelay: time.Hour}, nil},
		{"hang-mid-stream", mockllm.Config{}, []string{"X-Mock-Fault", "hang-mid-stream"}},
	} {
		s, url, c := start(t, tc.cfg)
		resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatStreamBody, tc.hdr...))
		require.NoError(t, err, tc.name)
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.name)

		// The first event arrives before the stream is done.
		first := readEvent(t, bufio.NewReader(resp.Body))
		assert.True(t, strings.HasPrefix(first, "data: {"), "%s: %q", tc.name, first)
		st := s.Stats()
		assert.Equal(t, int64(1), st.StreamsStarted, tc.name)
		assert.Equal(t, int64(0), st.StreamsCompleted, tc.name)

		resp.Body.Close() // the client goes away mid-stream
		require.Eventually(t, func() bool {
			st := s.Stats()
			return st.StreamsAborted == 1 && st.InFlight == 0
		}, 5*time.Second, time.Millisecond, tc.name)
		assert.Equal(t, int64(0), s.Stats().StreamsCompleted, tc.name)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	leakcheck.Check(t)
	s, url, stop, err := mockllm.Start(mockllm.Config{Latency: time.Hour, ChunkDelay: time.Hour})
	require.NoError(t, err)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	// Fill the server with requests that would never end by themselves.
	for _, hdr := range [][]string{
		{"X-Mock-Fault", "hang"},
		{"X-Mock-Fault", "hang-mid-stream", "X-Mock-Latency", "0s"},
		{"X-Mock-Latency", "0s"}, // a stream waiting an hour between chunks
		{},                       // a request waiting out an hour of latency
	} {
		go func() {
			resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatStreamBody, hdr...))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	require.Eventually(t, func() bool { return s.Stats().InFlight == 4 }, 5*time.Second, time.Millisecond)

	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	assert.Equal(t, 0, s.Stats().InFlight)
	stop() // idempotent

	resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatBody))
	if err == nil {
		resp.Body.Close()
	}
	assert.Error(t, err, "the listener is closed")
	// A closed Server mounted elsewhere answers 503.
	assert.Equal(t, http.StatusServiceUnavailable, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code)
}

func TestShutdownFinishesRequests(t *testing.T) {
	leakcheck.Check(t)
	s, url, _, err := mockllm.Start(mockllm.Config{})
	require.NoError(t, err)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	type result struct {
		status int
		err    error
	}
	results := make(chan result, 2)
	for _, hdr := range [][]string{{"X-Mock-Latency", "300ms"}, {"X-Mock-Fault", "hang"}} {
		go func() {
			resp, err := c.Do(newRequest(t, http.MethodPost, url+"/v1/chat/completions", chatBody, hdr...))
			if err != nil {
				results <- result{err: err}
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, err: err}
		}()
	}
	require.Eventually(t, func() bool { return s.Stats().InFlight == 2 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	var ok, broken int
	for range 2 {
		r := <-results
		if r.err == nil && r.status == http.StatusOK {
			ok++
		} else if r.err != nil {
			broken++
		}
	}
	assert.Equal(t, 1, ok, "the slow request is answered")
	assert.Equal(t, 1, broken, "the hung one is cut off")
}

// An overload after a stream has begun ends it half way with the
// provider's own error event, in the shape of the route; a JSON answer
// gets the overload status.
func TestOverloadMidStream(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		wantEnd          string // what the stream ends with
		wantGone         string // what it never reaches
	}{
		{"anthropic", "/v1/messages", messagesStreamBody,
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded (simulated by mockllm)\"}}\n\n",
			"message_stop"},
		{"openai", "/v1/chat/completions", chatStreamBody,
			"data: {\"error\":{\"message\":\"The server is overloaded or not ready yet. (simulated by mockllm)\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n",
			"\"finish_reason\":\"stop\""},
	} {
		for _, random := range []bool{false, true} {
			cfg, hdr := mockllm.Config{}, []string{"X-Mock-Fault", "overload-mid-stream"}
			if random {
				cfg, hdr = mockllm.Config{Faults: mockllm.Faults{OverloadedMidStream: 1}}, nil
			}
			s, url, c := start(t, cfg)
			resp, got := post(t, c, url+tc.path, tc.body, hdr...)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: the stream begins well", tc.name)
			assert.True(t, strings.HasSuffix(string(got), tc.wantEnd), "%s random=%v: ends with the overload event: %s", tc.name, random, got)
			assert.NotContains(t, string(got), tc.wantGone, "%s: the answer stops half way", tc.name)
			assert.Greater(t, strings.Count(string(got), "data: "), 2, "%s: the first half arrived", tc.name)
			st := s.Stats()
			assert.Equal(t, int64(1), st.StreamsOverloaded, tc.name)
			assert.Equal(t, int64(1), st.StreamsAborted, tc.name)
			assert.Equal(t, int64(0), st.StreamsCompleted, tc.name)
			assert.Equal(t, 0, st.InFlight, "%s: the place is given back", tc.name)
		}
	}

	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	for path, want := range map[string]int{"/v1/messages": 529, "/v1/chat/completions": 503} {
		body := chatBody
		if path == "/v1/messages" {
			body = messagesBody
		}
		rec := serve(s, http.MethodPost, path, body, "X-Mock-Fault", "overload-mid-stream")
		assert.Equal(t, want, rec.Code, "%s: a JSON answer gets the overload status", path)
		if path == "/v1/messages" {
			assert.Contains(t, rec.Body.String(), "overloaded_error")
		}
	}
}

// ping-mid-stream sends half of a stream, then only keep-alive events,
// each API's own, until the client leaves.
func TestPingMidStreamKeepsTheStreamOpenWithKeepAlives(t *testing.T) {
	for _, tc := range []struct{ path, body, ping string }{
		{"/v1/messages", messagesStreamBody, "event: ping\ndata: {\"type\": \"ping\"}\n"},
		{"/v1/chat/completions", chatStreamBody, ": keep-alive\n"},
	} {
		s, url, c := start(t, mockllm.Config{ChunkDelay: time.Millisecond})
		resp, err := c.Do(newRequest(t, http.MethodPost, url+tc.path, tc.body, "X-Mock-Fault", "ping-mid-stream"))
		require.NoError(t, err, tc.path)
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.path)
		r := bufio.NewReader(resp.Body)
		// Half of the stream, then keep-alives: 20 in a row, and never
		// the stream's end.
		pings := 0
		for n := 0; pings < 20; n++ {
			require.Less(t, n, 100, "%s: 20 keep-alives in a row within 100 events", tc.path)
			if ev := readEvent(t, r); ev == tc.ping {
				pings++
			} else {
				require.Zero(t, pings, "%s: %q after a keep-alive", tc.path, ev)
			}
		}
		resp.Body.Close()
		require.Eventually(t, func() bool {
			st := s.Stats()
			return st.StreamsAborted == 1 && st.InFlight == 0
		}, 5*time.Second, time.Millisecond, tc.path)
		assert.Zero(t, s.Stats().StreamsCompleted, tc.path)
	}
}
