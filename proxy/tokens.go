package proxy

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// tokenHeaders are the token-budget headers tokenBudgets reads, limit,
// remaining and reset of each: OpenAI's, then Anthropic's input, output
// and total. The reset, when the budget is full again, tells the lane how
// fast it refills (see lane.TokenReport): OpenAI's is a duration ("6m0s",
// "1s", "20ms"), Anthropic's an RFC 3339 time.
var tokenHeaders = [...]struct {
	kind                    lane.TokenKind
	limit, remaining, reset string
	// anthropic is set for Anthropic's headers, whose remaining is
	// documented as rounded to the nearest thousand, and whose reset is
	// a time.
	anthropic bool
}{
	{lane.Tokens, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", false},
	{lane.InputTokens, "Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset", true},
	{lane.OutputTokens, "Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset", true},
	{lane.Tokens, "Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset", true},
}

// tokenHeaderNames are the names of tokenHeaders: limit, remaining, reset,
// and so on, in their order.
var tokenHeaderNames = func() (names [3 * len(tokenHeaders)]string) {
	for i, th := range tokenHeaders {
		names[3*i], names[3*i+1], names[3*i+2] = th.limit, th.remaining, th.reset
	}
	return names
}()

// A reset's precision. OpenAI's durations are written to the millisecond
// (a long one may be rounded further: a hundredth of it is allowed for);
// Anthropic's times to the second, and they are read against this
// machine's clock, which may differ from the provider's.
const (
	durationResetError = time.Millisecond
	timeResetError     = 2 * time.Second
)

// tokenReset reads a token budget's reset header, v, at now: how long
// until the budget is full again and how far off that may be; 0 when v is
// absent or malformed, or says a time already past.
func tokenReset(v []byte, anthropic bool, now time.Time) (reset, off time.Duration) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return 0, 0
	}
	if anthropic {
		t, err := time.Parse(time.RFC3339, string(v))
		if err != nil || !t.After(now) {
			return 0, 0
		}
		return t.Sub(now), timeResetError
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d <= 0 {
		return 0, 0
	}
	return d, max(durationResetError, d/100)
}

// roundedRemaining is what a remaining count rounded to the nearest
// thousand can stand for at least: a multiple of 1,000 may be up to 500
// more than what is left, and a budget that a lane spends to the last
// token must not count those. Other counts were not rounded.
func roundedRemaining(remaining float64) float64 {
	if remaining > 0 && math.Mod(remaining, 1000) == 0 {
		return remaining - 500
	}
	return remaining
}

// tokenBudgets reads the token budgets an answer reports at now, for the
// lane's token pacer. Anthropic's anthropic-ratelimit-tokens-* is the
// tightest of its input and output budgets, so it counts only when
// neither of those is reported. Malformed values are skipped (a malformed
// reset leaves the budget's refill to what the lane knows).
func tokenBudgets(h *fasthttp.ResponseHeader, now time.Time) (out [len(tokenHeaders)]lane.TokenReport, n int) {
	var v [len(tokenHeaderNames)][]byte
	peekFirst(h, tokenHeaderNames[:], v[:])
	split := false // Anthropic's input or output budget was reported
	for i, th := range tokenHeaders {
		if th.kind == lane.Tokens && i > 0 && split {
			continue
		}
		l, r := v[3*i], v[3*i+1]
		if len(l) == 0 || len(r) == 0 {
			continue
		}
		limit, err1 := strconv.ParseFloat(string(bytes.TrimSpace(l)), 64)
		remaining, err2 := strconv.ParseFloat(string(bytes.TrimSpace(r)), 64)
		remainingErr := 1.0 // a count of whole tokens
		if th.anthropic {
			remaining, remainingErr = roundedRemaining(remaining), 1000
		}
		rep := lane.TokenReport{Kind: th.kind, Limit: limit, Remaining: min(remaining, limit), RemainingError: remainingErr}
		rep.Reset, rep.ResetError = tokenReset(v[3*i+2], th.anthropic, now)
		if err1 != nil || err2 != nil || !rep.Valid() {
			continue
		}
		out[n] = rep
		n++
		split = split || th.kind != lane.Tokens
	}
	return out, n
}

// OpenAI's 429 for a token budget states its numbers in the message:
// "Rate limit reached for gpt-4o in organization org-… on tokens per min
// (TPM): Limit 30000, Used 29800, Requested 750. Please try again in
// 1.1s." A call that can never fit gets "Request too large for gpt-4o … on
// tokens per min (TPM): Limit 30000, Requested 40000."
var (
	tpmMarker      = []byte("on tokens per min (TPM): ")
	tooLargeMarker = []byte("Request too large for ")
)

// tokensFrom429 reads the token budget a 429's message states: limit, and
// what remained (limit - used). ok is false when the message states none.
func tokensFrom429(body []byte) (r lane.TokenReport, ok bool) {
	i := bytes.Index(body, tpmMarker)
	if i < 0 {
		return r, false
	}
	rest := body[i+len(tpmMarker):]
	limit, ok1 := numberAfter(rest, "Limit ")
	used, ok2 := numberAfter(rest, "Used ")
	if !ok1 || !ok2 {
		return r, false
	}
	r = lane.TokenReport{Kind: lane.Tokens, Limit: limit, Remaining: max(0, limit-used)}
	return r, r.Valid()
}

// isTooLarge reports whether a 429 says the call can never fit the budget
// (OpenAI's "Request too large"): retrying cannot fix it.
func isTooLarge(body []byte) bool { return bytes.Contains(body, tooLargeMarker) }

// numberAfter reads the whole number that follows label in b (within the
// next 200 bytes).
func numberAfter(b []byte, label string) (float64, bool) {
	b = b[:min(len(b), 200)]
	i := bytes.Index(b, []byte(label))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(label):]
	j := 0
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == ',') {
		j++
	}
	digits := bytes.ReplaceAll(b[:j], []byte(","), nil)
	if len(digits) == 0 || len(digits) > 15 {
		return 0, false
	}
	n, err := strconv.ParseFloat(string(digits), 64)
	return n, err == nil
}

// textBytes returns the size of a request body less the base64 data it
// carries inline: images (`data:image/png;base64,…`, Anthropic's
// `"source":{"type":"base64","data":"…"}`), audio and files. Providers
// count such data by what it shows (an image is some hundreds of tokens
// whatever its size), never as text at bytes a token, so counting its
// bytes as prompt would make a photo of 1 MB look like 300,000 tokens
// and refuse it as larger than a whole budget. Data is told from text
// as a run of at least minDataRun characters of the base64 alphabet
// (JSON may escape its slashes as `\/`): text has spaces or punctuation
// long before that, and text escaped as `\uXXXX` (Chinese sent with
// ASCII-only JSON) is not such a run. Only calls of lanes with a known
// token budget pay for it.
func textBytes(body []byte) int {
	n, run := len(body), 0
	for i := 0; i < len(body); i++ {
		switch b := body[i]; {
		case base64Char[b]:
			run++
			continue
		case b == '\\' && i+1 < len(body) && body[i+1] == '/':
			run += 2
			i++
			continue
		}
		if run >= minDataRun {
			n -= run
		}
		run = 0
	}
	if run >= minDataRun {
		n -= run
	}
	return n
}

// minDataRun is the shortest run of base64 characters textBytes takes for
// data rather than text: 16 KiB, an image of 12 KB. Text of such a run
// (a DNA sequence, a hex dump) is rare; smaller images, counted as text,
// cost a few thousand tokens in the estimate, which a call's usage then
// corrects.
const minDataRun = 16 << 10

// base64Char holds the characters of base64 data in a JSON string: the
// standard and URL-safe alphabets and padding.
var base64Char = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '+' || c == '/' || c == '=' || c == '-' || c == '_'
	}
	return t
}()

// maxTokensOf reads the most output tokens a request body asks for:
// max_completion_tokens, else max_tokens (OpenAI and Anthropic); 0 when
// it sets neither or is not JSON. Only calls of lanes with a known token
// budget pay for it.
func maxTokensOf(body []byte) int {
	var v struct {
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	n := v.MaxTokens
	if v.MaxCompletionTokens != nil {
		n = v.MaxCompletionTokens
	}
	if n == nil || *n <= 0 {
		return 0
	}
	return int(min(*n, 1<<30))
}
