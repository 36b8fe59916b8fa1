package mockllm

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// A token budget is a bucket of tokens that holds a window's worth (a
// minute, unless Config.TokenWindow says otherwise) and refills
// continuously, as providers' tokens-per-minute limits do. A
// request is charged its cost when admitted; a request that finds fewer
// tokens than its cost is refused with 429, and one that costs more than
// the whole budget can never run.
//
// The costs follow the providers' rules:
//   - TokensPerMinute (OpenAI's TPM) charges the prompt's tokens plus the
//     most the answer may use: max_completion_tokens or max_tokens, else
//     the answer's own length. It is not refunded.
//   - InputTokensPerMinute (Anthropic's ITPM) charges the prompt's tokens.
//   - OutputTokensPerMinute (Anthropic's OTPM) charges max_tokens (else the
//     answer's length) when the request is admitted, and refunds what the
//     answer did not use when it ends.

// budgetKind names one of a provider's budgets.
type budgetKind int

const (
	budgetNone budgetKind = iota
	budgetRequests
	budgetTokens
	budgetInput
	budgetOutput
)

// tokenBudget is one budget's state; the limiter guards it.
type tokenBudget struct {
	perMinute int           // the budget per window (its name says the usual window)
	window    time.Duration // refills whole in this
	tokens    float64
}

func (b *tokenBudget) on() bool { return b.perMinute > 0 }

// rate is the refill in tokens a second.
func (b *tokenBudget) rate() float64 { return float64(b.perMinute) / b.window.Seconds() }

// refill adds dt's worth of tokens.
func (b *tokenBudget) refill(dt time.Duration) {
	if b.on() {
		b.tokens = min(float64(b.perMinute), b.tokens+b.rate()*dt.Seconds())
	}
}

// state reports the budget for the headers: its size, what remains, the
// time until it is full again, and, for a cost that does not fit, the time
// until it does.
func (b *tokenBudget) state(cost int) budgetState {
	st := budgetState{on: b.on()}
	if !st.on {
		return st
	}
	rate := b.rate()
	st.limit, st.window = b.perMinute, b.window
	st.remaining = max(0, int(b.tokens))
	st.full = ceilDuration((float64(b.perMinute) - b.tokens) / rate)
	if float64(cost) > b.tokens {
		st.next = ceilDuration((float64(cost) - b.tokens) / rate)
	}
	return st
}

// budgetState is a budget as an answer's headers report it.
type budgetState struct {
	on        bool
	limit     int
	window    time.Duration // in which it refills whole
	remaining int
	full      time.Duration // until the budget is full again
	next      time.Duration // until a refused cost fits
}

// tokenCost is what a request costs the token budgets.
type tokenCost struct {
	input  int // the prompt's tokens
	output int // the most the answer may use
}

func (c tokenCost) total() int { return c.input + c.output }

// of returns what c costs budget k.
func (c tokenCost) of(k budgetKind) int {
	switch k {
	case budgetTokens:
		return c.total()
	case budgetInput:
		return c.input
	case budgetOutput:
		return c.output
	}
	return 0
}

// budgetName is how each provider's 429 names budget k, which refills
// whole in window: "tokens per min (TPM)" and "tokens per minute", "tokens
// per day (TPD)" and "tokens per day".
func budgetName(k budgetKind, window time.Duration) (openAI, anthropic string) {
	short, long, abbr := window.String(), window.String(), ""
	switch window {
	case time.Minute:
		short, long, abbr = "min", "minute", "M"
	case 24 * time.Hour:
		short, long, abbr = "day", "day", "D"
	case time.Second:
		short, long, abbr = "sec", "second", "S"
	}
	what := map[budgetKind]string{budgetTokens: "tokens", budgetInput: "input tokens", budgetOutput: "output tokens"}[k]
	openAI, anthropic = what+" per "+short, what+" per "+long
	if k == budgetTokens && abbr != "" {
		openAI += " (TP" + abbr + ")"
	}
	return openAI, anthropic
}

// errTokens is the 429 of a request that found too few tokens in budget k:
// OpenAI's message states the limit, the tokens used and those requested.
func errTokens(k budgetKind, model string, st budgetState, requested int) apiError {
	oa, an := budgetName(k, st.window)
	used := st.limit - st.remaining
	return apiError{
		status: http.StatusTooManyRequests, typ: "tokens", anthropicType: "rate_limit_error", code: "rate_limit_exceeded",
		message: fmt.Sprintf("Rate limit reached for %s in organization org-mockllm on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			model, oa, st.limit, used, requested, openAIDuration(st.next)),
		anthropicMessage: fmt.Sprintf("This request would exceed the rate limit for your organization (org-mockllm) of %d %s. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
			st.limit, an),
	}
}

// errTooManyTokens is the answer to a request that costs more than the
// whole budget k: it can never run.
func errTooManyTokens(k budgetKind, model string, st budgetState, requested int) apiError {
	oa, an := budgetName(k, st.window)
	limit := st.limit
	return apiError{
		status: http.StatusTooManyRequests, typ: "tokens", anthropicType: "rate_limit_error", code: "rate_limit_exceeded",
		message: fmt.Sprintf("Request too large for %s in organization org-mockllm on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
			model, oa, limit, requested),
		anthropicMessage: fmt.Sprintf("This request would exceed the rate limit for your organization (org-mockllm) of %d %s: it asks for %d. Reduce the prompt or max_tokens.",
			limit, an, requested),
	}
}

// setTokenHeaders adds the token budgets' state: OpenAI's
// x-ratelimit-*-tokens for the tokens budget, and on Anthropic routes
// anthropic-ratelimit-{input-tokens,output-tokens,tokens}-*, whose reset is
// an RFC 3339 time and whose tokens-* report the most restrictive of the
// budgets in force.
func setTokenHeaders(h http.Header, adm admission, sh shape, now time.Time) {
	if t := adm.budgets[budgetTokens]; t.on {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(t.limit))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(t.remaining))
		h.Set("X-Ratelimit-Reset-Tokens", openAIDuration(t.full))
	}
	if sh != shapeAnthropic {
		return
	}
	var tightest *budgetState
	for _, k := range []budgetKind{budgetInput, budgetOutput, budgetTokens} {
		st := adm.budgets[k]
		if !st.on {
			continue
		}
		if tightest == nil || st.remaining < tightest.remaining {
			tightest = &st
		}
		if k == budgetTokens {
			continue
		}
		name := "Input-Tokens"
		if k == budgetOutput {
			name = "Output-Tokens"
		}
		setAnthropicBudget(h, name, st, now)
	}
	if tightest != nil {
		setAnthropicBudget(h, "Tokens", *tightest, now)
	}
}

// setAnthropicBudget sets anthropic-ratelimit-NAME-{limit,remaining,reset}.
func setAnthropicBudget(h http.Header, name string, st budgetState, now time.Time) {
	h.Set("Anthropic-Ratelimit-"+name+"-Limit", strconv.Itoa(st.limit))
	h.Set("Anthropic-Ratelimit-"+name+"-Remaining", strconv.Itoa(st.remaining))
	h.Set("Anthropic-Ratelimit-"+name+"-Reset", rfc3339Ceil(now.Add(st.full)))
}

// rfc3339Ceil formats t in RFC 3339, rounded up to the second.
func rfc3339Ceil(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// maxTokensOf reads the most output tokens a request asks for:
// max_completion_tokens, else max_tokens; 0 when neither is set.
func maxTokensOf(body []byte) (int, *apiError) {
	var v struct {
		MaxTokens           *int `json:"max_tokens"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0, nil // the endpoint's own parse reports a bad body
	}
	n := 0
	switch {
	case v.MaxCompletionTokens != nil:
		n = *v.MaxCompletionTokens
	case v.MaxTokens != nil:
		n = *v.MaxTokens
	default:
		return 0, nil
	}
	if n < 1 {
		e := errInvalid("invalid_value", fmt.Sprintf("Invalid 'max_tokens': %d (want at least 1).", n))
		return 0, &e
	}
	return n, nil
}

// outputCost is what an answer of output tokens costs an output budget
// when admitted: the request's max tokens when it sets them, else output.
func outputCost(maxTokens, output int) int {
	if maxTokens > 0 {
		return maxTokens
	}
	return output
}

// kneeSlowdown is how much slower every call runs with inFlight calls in
// flight on a server whose knee is knee: (inFlight / knee)² beyond it.
func kneeSlowdown(knee, inFlight int) float64 {
	if knee <= 0 || inFlight <= knee {
		return 1
	}
	r := float64(inFlight) / float64(knee)
	return r * r
}

// generation is the time to produce n output tokens at perSecond tokens a
// second (0: at once).
func generation(n int, perSecond float64) time.Duration {
	if perSecond <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(math.Round(float64(n) / perSecond * float64(time.Second)))
}
