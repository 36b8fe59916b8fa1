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

// setDetailHeaders adds a call's execution details to its answer.
func setDetailHeaders(h *fasthttp.ResponseHeader, d *Details) {
	h.Set(HeaderStatus, string(d.Status))
	h.Set(HeaderAttempts, strconv.Itoa(d.Attempts))
	h.Set(HeaderQueueMs, strconv.FormatInt(d.Queue.Milliseconds(), 10))
	if d.Status == StatusFailed {
		h.Set(HeaderShouldRetry, "false")
	}
}
