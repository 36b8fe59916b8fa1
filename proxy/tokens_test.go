package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
)

// chatMax posts a chat completion asking for at most maxTokens and returns
// the status and body.
func chatMax(t *testing.T, c *http.Client, base string, maxTokens int) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-test","max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, maxTokens)
	resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// postOnce posts a chat completion of content asking for at most
// maxTokens, not to be retried, and returns the status.
func postOnce(c *http.Client, base, content string, maxTokens int) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":"gpt-test","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, content)))
	req.Header.Set(HeaderMaxRetries, "0")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// The lane learns the token budget from x-ratelimit-*-tokens and spends
// it: calls beyond it wait in Governor instead of collecting 429s; a call
// that costs more than the whole budget fails at once, unsent.
func TestTokenBudgetFromHeadersIsSpent(t *testing.T) {
	checkLeaks(t)
	begin := time.Now()
	mock, up := startMock(t, mockllm.Config{TokensPerMinute: 60000}) // 1000 a second
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	// Each call costs the provider 1 prompt token + 100: 600 fit in the
	// budget, the rest must wait for its refill.
	const calls, cost = 620, 101
	var last time.Duration // the last call's, sent to answered
	for i := range calls {
		sent := time.Now()
		status, body := chatMax(t, c, base, 100)
		last = time.Since(sent)
		require.Equal(t, http.StatusOK, status, "call %d: %s", i, body)
	}
	assert.Zero(t, mock.Stats().RateLimited, "the budget was met by waiting, not by 429s")

	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	require.Len(t, lanes[0].TokenBudgets, 1)
	b := lanes[0].TokenBudgets[0]
	assert.Equal(t, "tokens", b.Kind)
	assert.Equal(t, 60000.0, b.PerMinute)
	// Spent: what is left is at most what the provider's bucket can hold
	// after these calls, full at the start and refilled at 1000 a second
	// since (on a quick machine, about 600; a slow one refills more). The
	// lane dates the last report no later than the provider can have
	// counted the call, and no earlier than its dispatch: it may count
	// the refill of that call's time twice. One call's cost more allows
	// for rounding.
	took := time.Since(begin)
	bound := 60000 + 1000*(took+last).Seconds() - (calls-1)*cost
	t.Logf("%.0f tokens left after %v, at most %.0f", b.Remaining, took, bound)
	assert.LessOrEqual(t, b.Remaining, bound, "the budget is spent (%v since the start)", took)

	received := mock.Stats().Received
	status, body := chatMax(t, c, base, 70000)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, CodeExceedsTokenBudget)
	assert.Contains(t, body, "(call costs more tokens than the whole budget: about 70002 tokens, the whole budget is 60000)", "the message speaks to the user, without a Go package's prefix")
	assert.Equal(t, received, mock.Stats().Received, "nothing sent")
}

// Without headers the lane learns the budget from OpenAI's 429 message
// (Limit, Used, Requested), and the provider's own "Request too large" is
// final.
func TestTokenBudgetLearnedFrom429(t *testing.T) {
	checkLeaks(t)
	mock, up := startMock(t, mockllm.Config{TokensPerMinute: 60000, NoRateLimitHeaders: true})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	status, body := chatMax(t, c, base, 70000)
	assert.Equal(t, http.StatusTooManyRequests, status, "the provider's answer passes back")
	assert.Contains(t, body, "Request too large")
	assert.Equal(t, int64(1), mock.Stats().Received, "final: not retried")
	assert.Empty(t, lanesOf(t, c, base)[0].TokenBudgets, "no budget stated yet")

	// Spend the budget: the 429 that follows states it.
	status, _ = chatMax(t, c, base, 59990)
	require.Equal(t, http.StatusOK, status)
	status, _ = chatMax(t, c, base, 1000) // 429 (Limit 60000, Used …), then paced
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, int64(2), mock.Stats().RateLimited, "the request too large, and one for the spent budget")
	budgets := lanesOf(t, c, base)[0].TokenBudgets
	require.Len(t, budgets, 1)
	assert.Equal(t, lane.TokenBudgetInfo{Kind: "tokens", PerMinute: 60000, Limit: 60000, Share: 1, Remaining: budgets[0].Remaining}, budgets[0])

	received := mock.Stats().Received
	status, body = chatMax(t, c, base, 70000)
	assert.Equal(t, http.StatusBadRequest, status, "known now: refused before sending")
	assert.Contains(t, body, CodeExceedsTokenBudget)
	assert.Equal(t, received, mock.Stats().Received)
}

func TestTokenHeadersAndMessagesParse(t *testing.T) {
	r, ok := tokensFrom429([]byte(`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30,000, Used 29800, Requested 750. Please try again in 1.1s.","type":"tokens"}}`))
	require.True(t, ok)
	assert.Equal(t, lane.TokenReport{Kind: lane.Tokens, Limit: 30000, Remaining: 200}, r)
	for _, body := range []string{
		`{"error":{"message":"Rate limit reached for requests"}}`,
		`on tokens per min (TPM): Limit x, Used 3`,
		`on tokens per min (TPM): Limit 99999999999999999999, Used 3`,
		``,
	} {
		_, ok := tokensFrom429([]byte(body))
		assert.False(t, ok, body)
	}
	// Anthropic rounds remaining to the nearest thousand: 8,000 left may
	// be 7,500. A count that is no multiple of a thousand was not
	// rounded; OpenAI's counts are exact.
	var h fasthttp.ResponseHeader
	h.Set("Anthropic-Ratelimit-Output-Tokens-Limit", "8000")
	h.Set("Anthropic-Ratelimit-Output-Tokens-Remaining", "8000")
	h.Set("Anthropic-Ratelimit-Input-Tokens-Limit", "40000")
	h.Set("Anthropic-Ratelimit-Input-Tokens-Remaining", "31234")
	h.Set("X-Ratelimit-Limit-Tokens", "30000")
	h.Set("X-Ratelimit-Remaining-Tokens", "2000")
	reports, n := tokenBudgets(&h, time.Now())
	assert.Equal(t, []lane.TokenReport{
		{Kind: lane.Tokens, Limit: 30000, Remaining: 2000, RemainingError: 1},
		{Kind: lane.InputTokens, Limit: 40000, Remaining: 31234, RemainingError: 1000},
		{Kind: lane.OutputTokens, Limit: 8000, Remaining: 7500, RemainingError: 1000},
	}, reports[:n])

	// The resets: OpenAI's a duration, to the millisecond (a hundredth of
	// a long one); Anthropic's an RFC 3339 time, to the second, read
	// against this clock. One malformed, or past, says nothing.
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header, value string
		reset, off    time.Duration
	}{
		{"X-Ratelimit-Reset-Tokens", "6m0s", 6 * time.Minute, 3600 * time.Millisecond},
		{"X-Ratelimit-Reset-Tokens", "1s", time.Second, 10 * time.Millisecond},
		{"X-Ratelimit-Reset-Tokens", "20ms", 20 * time.Millisecond, time.Millisecond},
		{"X-Ratelimit-Reset-Tokens", "soon", 0, 0},
		{"X-Ratelimit-Reset-Tokens", "-1s", 0, 0},
		{"Anthropic-Ratelimit-Input-Tokens-Reset", "2026-11-26T12:01:30Z", 90 * time.Second, 2 * time.Second},
		{"Anthropic-Ratelimit-Input-Tokens-Reset", "2026-11-26T11:59:00Z", 0, 0},
		{"Anthropic-Ratelimit-Input-Tokens-Reset", "tomorrow", 0, 0},
	} {
		h.Reset()
		h.Set("X-Ratelimit-Limit-Tokens", "30000")
		h.Set("X-Ratelimit-Remaining-Tokens", "2000")
		h.Set("Anthropic-Ratelimit-Input-Tokens-Limit", "40000")
		h.Set("Anthropic-Ratelimit-Input-Tokens-Remaining", "31234")
		h.Set(tc.header, tc.value)
		reports, n := tokenBudgets(&h, now)
		require.Equal(t, 2, n, tc.value)
		r := reports[0]
		if strings.HasPrefix(tc.header, "Anthropic") {
			r = reports[1]
		}
		assert.Equal(t, tc.reset, r.Reset, "%s: %s", tc.header, tc.value)
		assert.Equal(t, tc.off, r.ResetError, "%s: %s", tc.header, tc.value)
	}

	assert.Equal(t, 64, maxTokensOf([]byte(`{"max_tokens":64}`)))
	assert.Equal(t, 32, maxTokensOf([]byte(`{"max_tokens":64,"max_completion_tokens":32}`)))
	assert.Zero(t, maxTokensOf([]byte(`{"max_tokens":-1}`)))
	assert.Zero(t, maxTokensOf([]byte(`not json`)))
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{}`), &v))
}

// Anthropic's input and output token budgets are learned apart.
func TestAnthropicTokenBudgetsLearned(t *testing.T) {
	checkLeaks(t)
	_, up := startMock(t, mockllm.Config{InputTokensPerMinute: 40000, OutputTokensPerMinute: 8000})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)
	body := `{"model":"claude-test","max_tokens":9000,"messages":[{"role":"user","content":"hi"}]}`
	post := func() (int, string) {
		resp, err := c.Post(base+"/v1/messages", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	status, _ := post()
	assert.Equal(t, http.StatusTooManyRequests, status, "9000 output tokens never fit 8000: the provider's answer")
	budgets := lanesOf(t, c, base)[0].TokenBudgets
	require.Len(t, budgets, 2, "%+v", budgets)
	assert.Equal(t, "input_tokens", budgets[0].Kind)
	assert.Equal(t, 40000.0, budgets[0].PerMinute)
	assert.Equal(t, "output_tokens", budgets[1].Kind)
	assert.Equal(t, 8000.0, budgets[1].PerMinute)
	status, resp := post()
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, resp, "9000 output_tokens, the whole budget is 8000")
}

// A streamed answer's usage, read as it passes, corrects the lane's
// estimates as a JSON answer's does: after one stream whose prompt took
// 4 bytes a token in a body of about 10, the lane estimates the same body
// from what it learned.
func TestStreamUsageCorrectsTokenEstimate(t *testing.T) {
	checkLeaks(t)
	_, up := startMock(t, mockllm.Config{TokensPerMinute: 600000})
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)
	prompt := strings.Repeat("abcd", 500) // 500 tokens for mockllm
	body := fmt.Sprintf(`{"model":"gpt-test","max_tokens":10,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, prompt)
	post := func() {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	post() // learns the budget
	l := p.lanes.All()[0]
	before := l.EstimateCost(len(body), 10)
	assert.Equal(t, (len(body)+3)/4, before.Prompt, "four bytes a token until an answer says otherwise")
	post() // costed, and corrected by its stream's usage
	after := l.EstimateCost(len(body), 10)
	assert.Less(t, after.Prompt, before.Prompt, "the stream said the prompt was 500 tokens")
	assert.GreaterOrEqual(t, after.Prompt, 500)
}

// A 429 that states a token budget counts the calls booked after the
// refused one as still to be charged, as a header report does: taken as
// is, it would forget them and let new calls spend their tokens again.
func TestTokens429CountsCallsBookedSince(t *testing.T) {
	checkLeaks(t)
	arrived := make(chan string, 3)
	refuse, finish := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(body, "refused"):
			arrived <- "refused"
			<-refuse
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for gpt-test in organization org-x on tokens per min (TPM): Limit 60000, Used 50000, Requested 101. Please try again in 1s.","type":"tokens","code":"rate_limit_exceeded"}}`)
			return
		case strings.Contains(body, "held"):
			arrived <- "held"
			<-finish
		default:
			w.Header().Set("X-Ratelimit-Limit-Tokens", "60000")
			w.Header().Set("X-Ratelimit-Remaining-Tokens", "60000")
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	}))
	t.Cleanup(up.Close)
	// Governor's clock stands still: the budget does not refill while the
	// test runs, however slowly the machine runs it.
	clock := newManualClock()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: clock.Now}))
	c := client(t)
	post := func(content string, maxTokens int) (int, error) { return postOnce(c, base, content, maxTokens) }

	status, err := post("first", 1)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "the budget is known from its headers")

	refused, held := make(chan int, 1), make(chan int, 1)
	go func() { s, _ := post("refused", 100); refused <- s }()
	require.Equal(t, "refused", <-arrived)
	go func() { s, _ := post("held", 20000); held <- s }()
	require.Equal(t, "held", <-arrived, "booked after the refused call")
	close(refuse)
	assert.Equal(t, http.StatusTooManyRequests, <-refused)

	// 10,000 left when the refused call came, less the 20,000 and a few
	// dozen (its prompt's estimate) booked by the held call since. No
	// refill: the clock has not moved.
	budgets := lanesOf(t, c, base)[0].TokenBudgets
	require.Len(t, budgets, 1)
	assert.InDelta(t, -10000, budgets[0].Remaining, 100, "the held call's tokens are still to be charged")
	close(finish)
	assert.Equal(t, http.StatusOK, <-held)
}

// A call the provider refused cost it no tokens: the lane gives its
// booking back, and its retry is booked once, not twice.
func TestRefusedCallsTokensAreGivenBack(t *testing.T) {
	checkLeaks(t)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch calls.Add(1) {
		case 1:
			w.Header().Set("X-Ratelimit-Limit-Tokens", "60000")
			w.Header().Set("X-Ratelimit-Remaining-Tokens", "10000")
		case 2:
			// A concurrency limit's refusal says nothing of the tokens.
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Too many concurrent requests.","type":"rate_limit_error","code":"rate_limit_exceeded"}}`)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	}))
	t.Cleanup(up.Close)
	// Governor's clock stands still: the budget does not refill.
	clock := newManualClock()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: clock.Now}))
	c := client(t)

	status, body := chatMax(t, c, base, 1)
	require.Equal(t, http.StatusOK, status, body)
	status, body = chatMax(t, c, base, 3000) // refused, then answered
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, int64(3), calls.Load())

	budgets := lanesOf(t, c, base)[0].TokenBudgets
	require.Len(t, budgets, 1)
	// 10,000 less the 3,000 and a few dozen (its prompt's estimate).
	assert.InDelta(t, 7000, budgets[0].Remaining, 100, "the call's tokens are booked once")
}

// shareClient calls a Governor, whose clock stands still, on an upstream
// that states one token budget.
type shareClient struct {
	t     *testing.T
	c     *http.Client
	base  string
	clock *manualClock
}

func newShareClient(t *testing.T, upstream string) *shareClient {
	clock := newManualClock()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, upstream), Now: clock.Now}))
	return &shareClient{t: t, c: client(t), base: base, clock: clock}
}

// post sends a call of content that may use 100 tokens, not retried, and
// returns its status.
func (g *shareClient) post(content string) int {
	status, err := postOnce(g.c, g.base, content, 100)
	require.NoError(g.t, err)
	return status
}

// share returns the share of the lane's token budget it takes as its own.
func (g *shareClient) share() float64 {
	budgets := lanesOf(g.t, g.c, g.base)[0].TokenBudgets
	require.Len(g.t, budgets, 1)
	return budgets[0].Share
}

// A 429 whose token headers show less left than the call costs, of a call
// booked knowing the budget, says others spend the budget too: the lane
// takes a smaller share of it. A 429 whose headers show room (another
// budget's refusal) takes nothing.
func TestTokenRefusalCutsTheLanesShare(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Ratelimit-Limit-Tokens", "60000")
		switch {
		case strings.Contains(string(b), "empty"):
			w.Header().Set("X-Ratelimit-Remaining-Tokens", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached on tokens per min (TPM)","type":"tokens","code":"rate_limit_exceeded"}}`)
			return
		case strings.Contains(string(b), "room"):
			w.Header().Set("X-Ratelimit-Remaining-Tokens", "50000")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached on requests per min (RPM)","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		w.Header().Set("X-Ratelimit-Remaining-Tokens", "60000")
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	}))
	t.Cleanup(up.Close)
	g := newShareClient(t, up.URL)
	post, share := g.post, g.share

	require.Equal(t, http.StatusOK, post("first"), "the budget is known from its headers")
	assert.Equal(t, 1.0, share())
	require.Equal(t, http.StatusTooManyRequests, post("room"))
	assert.Equal(t, 1.0, share(), "the budget had room: not its refusal")
	require.Equal(t, http.StatusTooManyRequests, post("empty"))
	assert.InDelta(t, 0.7, share(), 1e-9, "the budget was empty")
}

// A budget known only from OpenAI's 429 messages (no headers) is shared
// as one known from headers: a 429 stating less left than the call costs,
// of a call booked knowing the budget, cuts the lane's share of it, and
// the answers of calls booked on it, which say it held room for them,
// grow the share back.
func TestTokenRefusalByMessageCutsTheLanesShare(t *testing.T) {
	checkLeaks(t)
	message := func(used int) string {
		return fmt.Sprintf(`{"error":{"message":"Rate limit reached for gpt-test in organization org-x on tokens per min (TPM): Limit 60000, Used %d, Requested 150. Please try again in 1s.","type":"tokens","code":"rate_limit_exceeded"}}`, used)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(string(b), "learn"):
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, message(50000))
			return
		case strings.Contains(string(b), "empty"):
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, message(60000))
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	}))
	t.Cleanup(up.Close)
	g := newShareClient(t, up.URL)
	post, share := g.post, g.share
	clock := g.clock

	require.Equal(t, http.StatusTooManyRequests, post("learn"))
	assert.Equal(t, 1.0, share(), "learned from a call sent blind: no cut")
	require.Equal(t, http.StatusTooManyRequests, post("empty"))
	assert.InDelta(t, 0.7, share(), 1e-9, "the budget held less than the call")

	// 5 s on, the share's count has refilled (70% of 1,000 a second) and
	// a call booked on the budget is answered: the budget held room.
	clock.Advance(5 * time.Second)
	require.Equal(t, http.StatusOK, post("ok"))
	assert.InDelta(t, 0.7+5*0.02, share(), 1e-9, "grown back by 2% of the budget a second")
}

// A token budget is paced at the refill its reset headers say: mockllm's
// daily budget of 8,640,000 tokens refills 6,000 a minute (x-ratelimit-
// reset-tokens "50s" after a call of 5,000 tokens), not 8,640,000 a
// minute; a budget of 60,000 a second refills 3,600,000 a minute, not
// 60,000. Anthropic's reset times say the same of its budgets. Each lane
// shows the budget's size too.
func TestTokenBudgetRefillFromResetHeaders(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name      string
		cfg       mockllm.Config
		anthropic bool
		perMinute float64
		within    float64 // relative error allowed by the resets' rounding
	}{
		{"openai per day", mockllm.Config{TokensPerMinute: 8_640_000, TokenWindow: 24 * time.Hour}, false, 6000, 0.02},
		{"openai per second", mockllm.Config{TokensPerMinute: 60000, TokenWindow: time.Second}, false, 3_600_000, 0.05},
		{"openai per minute", mockllm.Config{TokensPerMinute: 60000}, false, 60000, 0},
		{"anthropic per day", mockllm.Config{InputTokensPerMinute: 8_640_000, TokenWindow: 24 * time.Hour}, true, 6000, 0.5},
		{"anthropic per minute", mockllm.Config{InputTokensPerMinute: 60000}, true, 60000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, up := startMock(t, tc.cfg)
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
			c := client(t)
			for range 3 {
				var status int
				if tc.anthropic {
					// 4,000 bytes of prompt: about 1,000 input tokens.
					body := fmt.Sprintf(`{"model":"claude-test","max_tokens":10,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("abcd", 1000))
					req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
					require.NoError(t, err)
					req.Header.Set("Anthropic-Version", "2023-06-01")
					resp, err := c.Do(req)
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				} else {
					status, _ = chatMax(t, c, base, 5000)
				}
				require.Equal(t, http.StatusOK, status)
			}
			budgets := lanesOf(t, c, base)[0].TokenBudgets
			require.Len(t, budgets, 1, "%+v", budgets)
			b := budgets[0]
			limit := float64(tc.cfg.TokensPerMinute + tc.cfg.InputTokensPerMinute)
			assert.Equal(t, limit, b.Limit, "%+v", b)
			if tc.within == 0 {
				assert.Equal(t, tc.perMinute, b.PerMinute, "%+v", b)
			} else {
				assert.InEpsilon(t, tc.perMinute, b.PerMinute, tc.within, "%+v", b)
			}
		})
	}
}

// An answer whose usage counts a prompt far beyond its body (an image sent
// by its URL; a provider or a gateway that counts wrong: 2^53 tokens)
// leaves the lane's next calls alone: a 200 KB prompt, about 50,000
// tokens, within a budget of 200,000 a minute, is sent and answered, not
// refused as larger than the whole budget (it was, and every call of the
// lane after the 2^53 count was, for good: refused calls teach nothing).
func TestAbsurdUsageDoesNotRefuseTheNextCalls(t *testing.T) {
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		prompt := r.Header.Get("X-Test-Prompt-Tokens")
		if prompt == "" {
			prompt = fmt.Sprint(len(body) / 4)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-ratelimit-limit-tokens", "200000")
		w.Header().Set("x-ratelimit-remaining-tokens", "199000")
		w.Header().Set("x-ratelimit-reset-tokens", "300ms")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%s,"completion_tokens":5}}`, prompt)
	}))
	t.Cleanup(up.Close)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
	c := client(t)
	post := func(key, prompt, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if prompt != "" {
			req.Header.Set("X-Test-Prompt-Tokens", prompt)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	short := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	image := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`
	large := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 40000))
	for _, tc := range []struct{ key, body, prompt string }{
		{"sk-image", image, "1500"},
		{"sk-absurd", short, "9007199254740992"},
	} {
		status, body := post(tc.key, "", short) // learns the budget
		require.Equal(t, http.StatusOK, status, body)
		status, body = post(tc.key, tc.prompt, tc.body)
		require.Equal(t, http.StatusOK, status, body)
		for i := range 3 {
			status, body = post(tc.key, "", large)
			assert.Equal(t, http.StatusOK, status, "%s: large call %d: %s", tc.key, i, body)
			status, body = post(tc.key, "", short)
			assert.Equal(t, http.StatusOK, status, "%s: short call %d: %s", tc.key, i, body)
		}
	}
}

// Base64 data carried inline (an image, a PDF, audio) is no prompt text:
// the size the lane weighs at bytes a token leaves it out, and text
// (English, Chinese escaped as \uXXXX, a long URL) is counted whole.
func TestTextBytesLeavesOutInlineData(t *testing.T) {
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xef, 0xbe, 0x01, 0x02}, 3000)) // '+' and '/' included
	escaped := strings.ReplaceAll(data, "/", `\/`)                                                      // PHP's json_encode
	chinese, _ := json.Marshal(strings.Repeat("你好世界", 500))
	ascii := strings.ReplaceAll(string(chinese), "你", `\u4f60`)
	ascii = strings.ReplaceAll(ascii, "好", `\u597d`)
	ascii = strings.ReplaceAll(ascii, "世", `\u4e16`)
	ascii = strings.ReplaceAll(ascii, "界", `\u754c`)
	for _, tc := range []struct {
		name, body string
		data       int // bytes that are data, not text
	}{
		{"OpenAI image by data URL", `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + data + `"}}]}]}`, len(data)},
		{"Anthropic base64 source", `{"messages":[{"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}}]}]}`, len(data)},
		{"escaped slashes", `{"url":"data:image/jpeg;base64,` + escaped + `"}`, len(escaped)},
		{"English", `{"content":"` + strings.Repeat("word ", 4000) + `"}`, 0},
		{"Chinese as \\uXXXX", `{"content":` + ascii + `}`, 0},
		{"a long URL", `{"url":"https://example.com/` + strings.Repeat("a/b?c=d&", 200) + `"}`, 0},
		{"a run just short of data", `{"k":"` + strings.Repeat("A", minDataRun-1) + `"}`, 0},
		{"a run as long as data", `{"k":"` + strings.Repeat("A", minDataRun) + `"}`, minDataRun},
	} {
		assert.Equal(t, len(tc.body)-tc.data, textBytes([]byte(tc.body)), tc.name)
	}
}

// A call carrying a photo inline (1.2 MB of base64) on an account of
// 200,000 tokens a minute is sent, not refused as larger than the whole
// budget: the provider counts the image as hundreds of tokens, not its
// bytes as text.
func TestInlineImageIsNotCountedAsText(t *testing.T) {
	checkLeaks(t)
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-ratelimit-limit-tokens", "200000")
		w.Header().Set("x-ratelimit-remaining-tokens", "199000")
		w.Header().Set("x-ratelimit-reset-tokens", "300ms")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1105,"completion_tokens":5}}`)
	}))
	t.Cleanup(up.Close)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
	c := client(t)
	photo := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("\xff\xd8\xff\xe0 a photo "), 90000))
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}]}`, // learns the budget
		`{"model":"m","max_tokens":300,"messages":[{"role":"user","content":[{"type":"text","text":"What is in this photo?"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + photo + `"}}]}]}`,
	} {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	}
	assert.Equal(t, int64(2), got.Load(), "both calls reached the provider")
}

// A provider that states its token budget only in its 429 messages
// (OpenAI's numbers, no x-ratelimit headers) and refuses a call larger
// than the whole budget with "Request too large": a minute after the
// budget was last stated, one such call is sent to learn whether it grew;
// its refusal, which reports no budget, keeps the size standing, so the
// next such call gets 400 exceeds_token_budget at once instead of being
// sent too.
func TestTooLargeRefusalWithoutHeadersKeepsRefusingAtOnce(t *testing.T) {
	checkLeaks(t)
	var large atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		msg := "Rate limit reached for m in organization org-x on tokens per min (TPM): Limit 30000, Used 29990, Requested 20. Please try again in 1s."
		if len(body) > 100_000 {
			large.Add(1)
			msg = "Request too large for m in organization org-x on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully."
		}
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"tokens","code":"rate_limit_exceeded"}}`, msg)
	}))
	t.Cleanup(up.Close)
	var offset atomic.Int64 // the test's clock, ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Now: now, MaxPause: 10 * time.Millisecond}))
	c := client(t)
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(HeaderMaxRetries, "0")
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	short := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	big := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, strings.Repeat("word ", 40000))

	status, body := post(short) // its 429 states the budget: 30,000
	require.Equal(t, http.StatusTooManyRequests, status, body)
	status, body = post(big)
	require.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, "exceeds_token_budget")
	assert.Zero(t, large.Load(), "refused at once")

	offset.Add(int64(time.Minute + time.Second))
	status, body = post(big)
	require.Equal(t, http.StatusTooManyRequests, status, "a minute on, one is sent: %s", body)
	assert.Contains(t, body, "Request too large")
	assert.EqualValues(t, 1, large.Load())

	status, body = post(big)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, "exceeds_token_budget")
	assert.EqualValues(t, 1, large.Load(), "the budget has not grown: the next is refused at once, not sent")
}

// Budgets of absurd size (1e308 tokens or requests, a tenth left, full
// again in a second or a millisecond: a gateway's stand-in for
// "unlimited", or garbage) are ignored, as NaN is, and leave
// /governor/lanes and the live page readable and the lane's calls
// answered: their rates are beyond what a float holds. A budget of
// lane.MaxBudget is still taken, its numbers finite.
func TestAbsurdBudgetsLeaveTheLanesReadable(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		limit, remaining string
		budgets          int // token budgets the lane shows
		requests         bool
	}{
		{"1e308", "1e307", 0, false},
		{"9223372036854775807", "9223372036854775807", 0, false},
		{"1e15", "1e14", 2, true},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				if strings.HasPrefix(r.URL.Path, "/v1/messages") {
					w.Header().Set("anthropic-ratelimit-input-tokens-limit", tc.limit)
					w.Header().Set("anthropic-ratelimit-input-tokens-remaining", tc.remaining)
					w.Header().Set("anthropic-ratelimit-input-tokens-reset", time.Now().Add(time.Second).UTC().Format(time.RFC3339))
				} else {
					w.Header().Set("x-ratelimit-limit-tokens", tc.limit)
					w.Header().Set("x-ratelimit-remaining-tokens", tc.remaining)
					w.Header().Set("x-ratelimit-reset-tokens", "1s")
					w.Header().Set("x-ratelimit-limit-requests", tc.limit)
					w.Header().Set("x-ratelimit-remaining-requests", tc.remaining)
					w.Header().Set("x-ratelimit-reset-requests", "1ms")
				}
				fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`)
			}))
			t.Cleanup(up.Close)
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
			c := client(t)
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				for i := range 3 {
					resp, err := c.Post(base+path, "application/json", strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
					require.NoError(t, err)
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.Equal(t, http.StatusOK, resp.StatusCode, "%s call %d: %s", path, i, b)
				}
			}
			resp, err := c.Get(base + "/governor/lanes")
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "GET /governor/lanes: %s", b)
			var out struct{ Lanes []lane.Info }
			require.NoError(t, json.Unmarshal(b, &out))
			require.Len(t, out.Lanes, 1)
			l := out.Lanes[0]
			require.Len(t, l.TokenBudgets, tc.budgets, "%s", b)
			for _, tb := range l.TokenBudgets {
				assert.Equal(t, lane.MaxBudget, tb.Limit, "%+v", tb)
				assert.Greater(t, tb.PerMinute, 0.0, "%+v", tb)
			}
			if !tc.requests {
				assert.Nil(t, l.RequestBudget, "%s", b)
				return
			}
			require.NotNil(t, l.RequestBudget, "%s", b)
			assert.Equal(t, lane.MaxBudget, l.RequestBudget.Burst, "%+v", l.RequestBudget)
		})
	}
}
