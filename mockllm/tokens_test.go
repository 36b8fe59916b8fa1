package mockllm_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// tokenChat is a chat request of 100 prompt tokens (400 bytes) asking for
// at most maxTokens.
func tokenChat(maxTokens int) string {
	return fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		maxTokens, strings.Repeat("abcd", 100))
}

// tokenMessages is an Anthropic request of 100 input tokens asking for at
// most maxTokens.
func tokenMessages(maxTokens int) string {
	return fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
		maxTokens, strings.Repeat("abcd", 100))
}

func TestTokensPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{TokensPerMinute: 1000})
		defer s.Close()
		chat := func(maxTokens int) *httptest.ResponseRecorder {
			return serve(s, http.MethodPost, "/v1/chat/completions", tokenChat(maxTokens))
		}
		headers := func(w *httptest.ResponseRecorder) [3]string {
			h := w.Header()
			return [3]string{h.Get("X-Ratelimit-Limit-Tokens"), h.Get("X-Ratelimit-Remaining-Tokens"), h.Get("X-Ratelimit-Reset-Tokens")}
		}

		// Each call costs 100 prompt tokens + max_tokens 100.
		for i := range 5 {
			w := chat(100)
			require.Equal(t, http.StatusOK, w.Code, "call %d", i)
			reset := (time.Duration(12*(i+1)) * time.Second).String() // 12s … 1m0s
			assert.Equal(t, [3]string{"1000", fmt.Sprint(800 - 200*i), reset}, headers(w), "call %d", i)
		}
		w := chat(100)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "12000", w.Header().Get("Retry-After-Ms"), "200 tokens at 1000 a minute")
		assert.Equal(t, "12", w.Header().Get("Retry-After"))
		e := errorOf(t, w)
		assert.Equal(t, "rate_limit_exceeded", e["code"])
		assert.Equal(t, "tokens", e["type"])
		assert.Contains(t, e["message"], "on tokens per min (TPM): Limit 1000, Used 1000, Requested 200.")
		assert.Equal(t, [3]string{"1000", "0", "1m0s"}, headers(w))

		// After 6.1 s, 101 tokens have come back: a smaller call fits.
		time.Sleep(6100 * time.Millisecond)
		w = chat(100)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Contains(t, errorOf(t, w)["message"], "Limit 1000, Used 899, Requested 200.")
		w = chat(1)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "0", w.Header().Get("X-Ratelimit-Remaining-Tokens"), "101.7 refilled - 101 taken, floored")

		// More than the whole budget can never run: 429 without a hint.
		w = chat(1000)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Empty(t, w.Header().Get("Retry-After"))
		assert.Contains(t, errorOf(t, w)["message"], "Request too large for gpt-4o-mini")
		assert.Contains(t, errorOf(t, w)["message"], "Limit 1000, Requested 1100.")
	})
}

func TestAnthropicTokenBudgets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{InputTokensPerMinute: 600, OutputTokensPerMinute: 300})
		defer s.Close()
		msg := func(maxTokens int) *httptest.ResponseRecorder {
			return serve(s, http.MethodPost, "/v1/messages", tokenMessages(maxTokens))
		}
		budget := func(w *httptest.ResponseRecorder, name string) [3]string {
			h := w.Header()
			p := "Anthropic-Ratelimit-" + name + "-"
			return [3]string{h.Get(p + "Limit"), h.Get(p + "Remaining"), h.Get(p + "Reset")}
		}
		w := msg(100)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, [3]string{"600", "500", "2000-01-01T00:00:10Z"}, budget(w, "Input-Tokens"))
		// The answer used fewer output tokens than max_tokens: charged
		// 100 while it ran, the rest given back at its end; the headers
		// are those of its start.
		assert.Equal(t, [3]string{"300", "200", "2000-01-01T00:00:20Z"}, budget(w, "Output-Tokens"))
		assert.Equal(t, budget(w, "Output-Tokens"), budget(w, "Tokens"), "tokens-* is the tightest budget")
		assert.Empty(t, w.Header().Get("X-Ratelimit-Limit-Tokens"))

		w = msg(300)
		require.Equal(t, http.StatusTooManyRequests, w.Code, "300 output tokens do not fit after the first call's use")
		assert.NotEmpty(t, w.Header().Get("Retry-After"))
		body := decode(t, w.Body.Bytes())
		assert.Equal(t, "rate_limit_error", body["error"].(map[string]any)["type"])
		assert.Contains(t, body["error"].(map[string]any)["message"], "of 300 output tokens per minute")

		w = msg(301)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Empty(t, w.Header().Get("Retry-After"), "larger than the whole budget: waiting cannot help")
	})
}

func TestFillMaxTokensAndOutputSpeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{Latency: 100 * time.Millisecond, FillMaxTokens: true, OutputTokensPerSecond: 100})
		defer s.Close()
		start := time.Now()
		w := serve(s, http.MethodPost, "/v1/chat/completions", tokenChat(50))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, 600*time.Millisecond, time.Since(start), "100 ms to the first byte + 50 tokens at 100/s")
		usage := decode(t, w.Body.Bytes())["usage"].(map[string]any)
		assert.Equal(t, 50.0, usage["completion_tokens"])
		assert.Equal(t, 100.0, usage["prompt_tokens"])

		start = time.Now()
		w = serve(s, http.MethodPost, "/v1/messages", tokenMessages(200))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, 2100*time.Millisecond, time.Since(start))
		assert.Equal(t, 200.0, decode(t, w.Body.Bytes())["usage"].(map[string]any)["output_tokens"])

		// A stream's first byte comes after the latency; its chunks
		// spread over the generation.
		start = time.Now()
		w = serve(s, http.MethodPost, "/v1/messages",
			`{"model":"claude-haiku-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, 1100*time.Millisecond, time.Since(start))
		assert.Contains(t, w.Body.String(), `"output_tokens":100`)
	})
}

// Beyond its knee, the server never refuses: every call slows by
// (in flight / knee)², counted when it arrives.
func TestKneeSlowsInsteadOfRefusing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mockllm.New(mockllm.Config{Latency: 100 * time.Millisecond, Knee: 2})
		defer s.Close()
		took := make([]time.Duration, 4)
		var wg sync.WaitGroup
		for i := range took {
			wg.Go(func() {
				start := time.Now()
				w := serve(s, http.MethodPost, "/v1/chat/completions", chatBody)
				assert.Equal(t, http.StatusOK, w.Code)
				took[i] = time.Since(start)
			})
			synctest.Wait() // arrives before the next one
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 225 * time.Millisecond, 400 * time.Millisecond}, took)
		assert.Zero(t, s.Stats().RateLimited)
	})
}

func TestNoRateLimitHeaders(t *testing.T) {
	s := mockllm.New(mockllm.Config{TokensPerMinute: 150, Rate: 5, NoRateLimitHeaders: true})
	defer s.Close()
	w := serve(s, http.MethodPost, "/v1/chat/completions", tokenChat(10))
	require.Equal(t, http.StatusOK, w.Code)
	w = serve(s, http.MethodPost, "/v1/chat/completions", tokenChat(10))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	for name := range w.Header() {
		assert.NotContains(t, strings.ToLower(name), "ratelimit", name)
	}
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	assert.Contains(t, errorOf(t, w)["message"], "Limit 150, Used 110, Requested 110.")
}

func TestTokenConfigValidation(t *testing.T) {
	for _, c := range []mockllm.Config{
		{TokensPerMinute: -1}, {InputTokensPerMinute: -1}, {OutputTokensPerMinute: -1},
		{OutputTokensPerSecond: -1}, {Knee: -1},
	} {
		assert.Error(t, c.Validate(), "%+v", c)
	}
	w := serve(mockllm.New(mockllm.Config{}), http.MethodPost, "/v1/chat/completions", tokenChat(0))
	assert.Equal(t, http.StatusBadRequest, w.Code, "max_tokens 0")
}

// A budget of another window (TokenWindow) refills whole in it, and its
// reset headers say so as providers do: OpenAI's a duration ("8m20s" for
// a tenth of a daily budget), Anthropic's an RFC 3339 time. Its 429 names
// the window ("tokens per day (TPD)").
func TestTokenWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 14,400 a day is one token every 6 s; 1,000 a second.
		daily := mockllm.New(mockllm.Config{TokensPerMinute: 14400, InputTokensPerMinute: 14400, TokenWindow: 24 * time.Hour})
		defer daily.Close()
		w := serve(daily, http.MethodPost, "/v1/chat/completions", tokenChat(100)) // 200 tokens
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "20m0s", w.Header().Get("X-Ratelimit-Reset-Tokens"), "200 tokens at 1 per 6 s")
		w = serve(daily, http.MethodPost, "/v1/messages", tokenMessages(100), "anthropic-version", "2023-06-01") // 100 input tokens
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, time.Now().Add(20*time.Minute).UTC().Format(time.RFC3339), w.Header().Get("Anthropic-Ratelimit-Input-Tokens-Reset"),
			"the two calls' 200 input tokens at 1 per 6 s")
		w = serve(daily, http.MethodPost, "/v1/chat/completions", tokenChat(20000))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Contains(t, errorOf(t, w)["message"], "on tokens per day (TPD): Limit 14400")

		perSecond := mockllm.New(mockllm.Config{TokensPerMinute: 1000, TokenWindow: time.Second})
		defer perSecond.Close()
		w = serve(perSecond, http.MethodPost, "/v1/chat/completions", tokenChat(100))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "200ms", w.Header().Get("X-Ratelimit-Reset-Tokens"))
		time.Sleep(200 * time.Millisecond) // synctest: the bubble's clock
		w = serve(perSecond, http.MethodPost, "/v1/chat/completions", tokenChat(100))
		assert.Equal(t, "800", w.Header().Get("X-Ratelimit-Remaining-Tokens"), "refilled in 200 ms")
	})
}
