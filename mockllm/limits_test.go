package mockllm_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// background serves a request in a goroutine; the recorder is complete when
// the channel closes.
func background(h http.Handler, path, body string, hdr ...string) (*httptest.ResponseRecorder, chan struct{}) {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, r)
	}()
	return w, done
}

func errorOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	m := decode(t, w.Body.Bytes())
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "error body: %s", w.Body)
	return e
}

func TestConcurrencyCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{MaxConcurrency: 1, Latency: time.Second})
		defer s.Close()

		first, done := background(s, "/v1/chat/completions", chatBody)
		synctest.Wait() // the first request waits out its latency

		w := serve(s, http.MethodPost, "/v1/chat/completions", chatBody)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		e := errorOf(t, w)
		assert.Equal(t, "rate_limit_error", e["type"])
		assert.Equal(t, "rate_limit_exceeded", e["code"])
		assert.Empty(t, w.Header().Get("X-Ratelimit-Limit-Requests"), "no bucket, no bucket headers")

		w = serve(s, http.MethodPost, "/v1/messages", messagesBody)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		m := decode(t, w.Body.Bytes())
		assert.Equal(t, "error", m["type"])
		assert.Equal(t, "rate_limit_error", m["error"].(map[string]any)["type"])

		st := s.Stats()
		assert.Equal(t, 1, st.InFlight)
		assert.Equal(t, int64(2), st.RateLimited)

		<-done
		assert.Equal(t, http.StatusOK, first.Code)
		assert.Equal(t, time.Second, time.Since(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)))
		assert.Equal(t, http.StatusOK, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code, "room again")

		st = s.Stats()
		assert.Equal(t, 0, st.InFlight)
		assert.Equal(t, 1, st.MaxInFlight, "429ed requests are not counted in flight")
		assert.Equal(t, map[int]int64{200: 2, 429: 2}, st.Answered)
	})
}

func TestCapCountsWholeStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{MaxConcurrency: 1, ChunkDelay: time.Second, StreamChunks: 2})
		defer s.Close()
		stream, done := background(s, "/v1/chat/completions", chatStreamBody)
		synctest.Wait() // the stream has sent its first event and waits

		assert.Equal(t, http.StatusTooManyRequests, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code)
		<-done
		assert.Equal(t, http.StatusOK, stream.Code)
		assert.Equal(t, http.StatusOK, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code)
		st := s.Stats()
		assert.Equal(t, int64(1), st.StreamsStarted)
		assert.Equal(t, int64(1), st.StreamsCompleted)
	})
}

func TestTokenBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{Rate: 2, Burst: 1})
		defer s.Close()
		chat := func() *httptest.ResponseRecorder {
			return serve(s, http.MethodPost, "/v1/chat/completions", chatBody)
		}
		headers := func(w *httptest.ResponseRecorder) [3]string {
			h := w.Header()
			return [3]string{h.Get("X-Ratelimit-Limit-Requests"), h.Get("X-Ratelimit-Remaining-Requests"), h.Get("X-Ratelimit-Reset-Requests")}
		}

		w := chat()
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, [3]string{"1", "0", "500ms"}, headers(w))

		w = chat()
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "500", w.Header().Get("Retry-After-Ms"))
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, [3]string{"1", "0", "500ms"}, headers(w))
		assert.Equal(t, "rate_limit_exceeded", errorOf(t, w)["code"])

		time.Sleep(250 * time.Millisecond)
		w = chat()
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "250", w.Header().Get("Retry-After-Ms"))
		assert.Equal(t, [3]string{"1", "0", "250ms"}, headers(w))

		time.Sleep(250 * time.Millisecond)
		w = chat()
		require.Equal(t, http.StatusOK, w.Code)

		// Anthropic's headers on /v1/messages, the reset as an RFC 3339 time
		// rounded up to the second.
		time.Sleep(250 * time.Millisecond)
		w = serve(s, http.MethodPost, "/v1/messages", messagesBody)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Anthropic-Ratelimit-Requests-Limit"))
		assert.Equal(t, "0", w.Header().Get("Anthropic-Ratelimit-Requests-Remaining"))
		assert.Equal(t, "2000-01-01T00:00:01Z", w.Header().Get("Anthropic-Ratelimit-Requests-Reset"))
		assert.Equal(t, "250ms", w.Header().Get("X-Ratelimit-Reset-Requests"))
		assert.Equal(t, "rate_limit_error", decode(t, w.Body.Bytes())["error"].(map[string]any)["type"])

		assert.Equal(t, int64(3), s.Stats().RateLimited)
	})
}

func TestTokenBucketLongWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{Rate: 0.01, Burst: 2})
		defer s.Close()
		for range 2 {
			require.Equal(t, http.StatusOK, serve(s, http.MethodPost, "/v1/embeddings", `{"input":"x"}`).Code)
		}
		w := serve(s, http.MethodPost, "/v1/embeddings", `{"input":"x"}`)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "100000", w.Header().Get("Retry-After-Ms"))
		assert.Equal(t, "100", w.Header().Get("Retry-After"))
		assert.Equal(t, "3m20s", w.Header().Get("X-Ratelimit-Reset-Requests"))
	})
}

func TestSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{
			MaxConcurrency: 1,
			Latency:        time.Hour,
			Schedule: []mockllm.Phase{
				{At: 20 * time.Second, Rate: 1, Burst: 1},
				{At: 10 * time.Second, MaxConcurrency: 2},
			},
		})
		defer s.Close() // ends the requests still waiting out their hour

		_, _ = background(s, "/v1/chat/completions", chatBody)
		synctest.Wait()
		assert.Equal(t, http.StatusTooManyRequests, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code, "cap 1")
		assert.Equal(t, mockllm.Limits{MaxConcurrency: 1}, s.Stats().Limits)

		time.Sleep(10 * time.Second)
		assert.Equal(t, mockllm.Limits{MaxConcurrency: 2}, s.Stats().Limits)
		_, _ = background(s, "/v1/chat/completions", chatBody)
		synctest.Wait()
		assert.Equal(t, 2, s.Stats().InFlight, "cap 2 admits a second request")
		assert.Equal(t, http.StatusTooManyRequests, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code, "cap 2")

		time.Sleep(10 * time.Second)
		assert.Equal(t, mockllm.Limits{Rate: 1, Burst: 1}, s.Stats().Limits, "the phase replaces every limit")
		_, _ = background(s, "/v1/chat/completions", chatBody)
		synctest.Wait()
		assert.Equal(t, 3, s.Stats().InFlight, "no cap any more")
		w := serve(s, http.MethodPost, "/v1/chat/completions", chatBody)
		assert.Equal(t, http.StatusTooManyRequests, w.Code, "the bucket is empty")
		assert.Equal(t, "1000", w.Header().Get("Retry-After-Ms"))

		s.Reset()
		st := s.Stats()
		assert.Equal(t, mockllm.Limits{MaxConcurrency: 1}, st.Limits, "Reset restarts the schedule")
		assert.Equal(t, 3, st.InFlight, "requests in flight stay counted")
		assert.Equal(t, 3, st.MaxInFlight)
		assert.Equal(t, int64(0), st.Received)
		time.Sleep(10 * time.Second)
		assert.Equal(t, mockllm.Limits{MaxConcurrency: 2}, s.Stats().Limits, "offsets count from Reset")
	})
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{Latency: 300 * time.Millisecond, ChunkDelay: 100 * time.Millisecond, StreamChunks: 2})
		defer s.Close()
		elapsed := func(path, body string, hdr ...string) time.Duration {
			t0 := time.Now()
			w := serve(s, http.MethodPost, path, body, hdr...)
			require.Less(t, w.Code, 600)
			return time.Since(t0)
		}
		assert.Equal(t, 300*time.Millisecond, elapsed("/v1/chat/completions", chatBody))
		// role, 2 chunks, finish, usage, [DONE]: five pauses between six events
		assert.Equal(t, 800*time.Millisecond, elapsed("/v1/chat/completions", chatStreamBody))
		assert.Equal(t, 2*time.Second, elapsed("/v1/chat/completions", chatBody, "X-Mock-Latency", "2s"))
		assert.Equal(t, time.Duration(0), elapsed("/v1/chat/completions", chatBody, "X-Mock-Latency", "0s"))
		assert.Equal(t, time.Duration(0), elapsed("/v1/chat/completions", chatBody, "X-Mock-Fault", "429"), "a rejection comes at once")
		assert.Equal(t, 300*time.Millisecond, elapsed("/v1/chat/completions", chatBody, "X-Mock-Fault", "500"), "a failure comes after the latency")
		assert.Equal(t, time.Duration(0), elapsed("/v1/chat/completions", "{bad", "X-Mock-Latency", "1s"), "bad input is answered at once")
	})
}

// inFlightAtWrite records, at each write of the answer, how many requests
// the server counts in flight.
type inFlightAtWrite struct {
	*httptest.ResponseRecorder
	s       *mockllm.Server
	atWrite []int
}

func (w *inFlightAtWrite) Write(b []byte) (int, error) {
	w.atWrite = append(w.atWrite, w.s.Stats().InFlight)
	return w.ResponseRecorder.Write(b)
}

// A client that has read a whole answer must find the place free: the
// place is given back before the answer's last bytes are written. (Over
// HTTP, a JSON answer larger than net/http's buffer reached the client
// before the handler returned, and 13% of 3,000 back-to-back calls at a
// cap of 1 got a 429 their predecessor had already left room for.)
func TestCapFreedBeforeLastWrite(t *testing.T) {
	long := `{"model":"gpt-4o-mini","max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`
	longStream := `{"model":"gpt-4o-mini","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, path, body string
		hdr              []string
		status           int
	}{
		{"json", "/v1/chat/completions", chatBody, nil, http.StatusOK},
		{"long json", "/v1/chat/completions", long, nil, http.StatusOK},
		{"stream", "/v1/chat/completions", longStream, nil, http.StatusOK},
		{"messages", "/v1/messages", messagesBody, nil, http.StatusOK},
		{"500 after the latency", "/v1/chat/completions", chatBody, []string{mockllm.HeaderFault, "500"}, http.StatusInternalServerError},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := mockllm.New(mockllm.Config{MaxConcurrency: 1, Latency: 100 * time.Millisecond, FillMaxTokens: true, StreamChunks: 4})
				defer s.Close()
				r := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
				for i := 0; i+1 < len(c.hdr); i += 2 {
					r.Header.Set(c.hdr[i], c.hdr[i+1])
				}
				w := &inFlightAtWrite{ResponseRecorder: httptest.NewRecorder(), s: s}
				s.ServeHTTP(w, r)
				require.Equal(t, c.status, w.Code)
				require.NotEmpty(t, w.atWrite)
				assert.Equal(t, 0, w.atWrite[len(w.atWrite)-1], "in flight when the answer's last bytes were written")
				if len(w.atWrite) > 1 {
					assert.Equal(t, 1, w.atWrite[0], "a stream holds its place while it is generated")
				}
				assert.Equal(t, http.StatusOK, serve(s, http.MethodPost, "/v1/chat/completions", chatBody).Code, "room again")
			})
		})
	}
}
