package proxy

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Status is how a call ended, in Phoenix's ExecutionStatus words.
type Status string

// The statuses of a call or batch item.
const (
	StatusDidNotRun            Status = "DID_NOT_RUN"
	StatusCompleted            Status = "COMPLETED"
	StatusCompletedWithRetries Status = "COMPLETED_WITH_RETRIES"
	StatusFailed               Status = "FAILED"
)

// Details are a call's execution details.
type Details struct {
	Status   Status
	Attempts int
	// Errors has one short string per failed attempt, oldest first:
	// "429 rate_limit_exceeded", "timeout after 30s".
	Errors []string
	// Queue is the time spent waiting in the lane's queue, over all
	// attempts; Execution the time from dispatch to answer, over all
	// attempts (for a stream, to its headers).
	Queue, Execution time.Duration
	// StatusCode is the status the last attempt's answer came with, 0
	// when that attempt got none (no connection, no head in time). An
	// answer cut before its end (a stream the provider broke off) has
	// one, though the call has no answer to return.
	StatusCode int
}

// Response headers with a call's execution details.
const (
	HeaderStatus   = "X-Governor-Status"
	HeaderAttempts = "X-Governor-Attempts"
	HeaderQueueMs  = "X-Governor-Queue-Ms"
	// HeaderShouldRetry tells the official OpenAI and Anthropic SDKs not
	// to retry a call Governor has given up on.
	HeaderShouldRetry = "X-Should-Retry"
)

// The names of the detail headers as fasthttp stores them (canonical), so
// that setting them skips normalizing the names.
var (
	headerStatusKey      = []byte(HeaderStatus)
	headerAttemptsKey    = []byte(HeaderAttempts)
	headerQueueMsKey     = []byte(HeaderQueueMs)
	headerShouldRetryKey = []byte(HeaderShouldRetry)
	falseValue           = []byte("false")
)

// setDetailHeaders adds a call's execution details to its answer, and
// caps the retry hints of an answer Governor gave up on (see
// capRetryHints).
func setDetailHeaders(h *fasthttp.ResponseHeader, d *Details) {
	var buf [20]byte
	h.SetCanonical(headerStatusKey, []byte(d.Status))
	h.SetCanonical(headerAttemptsKey, strconv.AppendInt(buf[:0], int64(d.Attempts), 10))
	h.SetCanonical(headerQueueMsKey, strconv.AppendInt(buf[:0], d.Queue.Milliseconds(), 10))
	if d.Status == StatusFailed {
		h.SetCanonical(headerShouldRetryKey, falseValue)
		capRetryHints(h, time.Now())
	}
}

// capRetryHints caps the provider's Retry-After and retry-after-ms of an
// answer passed back to the client, as of now, at maxRetryAfterSeconds:
// every Retry-After Governor sends is at most that, the longest every
// official SDK honours (a longer one is ignored, not obeyed). A hint
// Governor cannot read is left as the provider sent it.
func capRetryHints(h *fasthttp.ResponseHeader, now time.Time) {
	const most = maxRetryAfterSeconds * time.Second
	if v := h.Peek(fasthttp.HeaderRetryAfter); len(v) > 0 {
		if d, ok := parseRetryAfter(v, now); ok && d > most {
			h.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(maxRetryAfterSeconds))
		}
	}
	if v := h.Peek("Retry-After-Ms"); len(v) > 0 {
		if d, ok := parseRetryAfterMs(v); ok && d > most {
			h.Set("Retry-After-Ms", strconv.FormatInt(most.Milliseconds(), 10))
		}
	}
}
