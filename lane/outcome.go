package lane

import "github.com/llmgovernor/governor/aimd"

// Outcome is what one upstream attempt came to. The caller classifies the
// answer; the lane counts it and feeds it to its controller.
type Outcome uint8

const (
	Answered    Outcome = iota // 1xx-3xx, or a 4xx that retrying cannot fix: passed back
	RateLimited                // 429 or 529: back off, slow the lane, retry
	Quota                      // 429 for exhausted quota or spend limit: final
	ServerError                // 500, 502, 503, 504: retry
	Timeout                    // no answer within the attempt timeout: retry
	ConnError                  // no answer at all (refused, reset): retry
	ClientGone                 // cut because the client left: not the provider's doing, not fed to the controller
)

var outcomeNames = [...]string{"answered", "rate_limited", "quota_exhausted", "server_error", "timeout", "connection_error", "client_gone"}

// String returns the outcome's name as metrics label it.
func (o Outcome) String() string { return outcomeNames[o] }

// Retryable reports whether another attempt may succeed.
func (o Outcome) Retryable() bool {
	switch o {
	case RateLimited, ServerError, Timeout, ConnError:
		return true
	}
	return false
}

// aimdOutcome maps an attempt's outcome to the controller's vocabulary:
// only 429/529 and timeouts are congestion signals.
func aimdOutcome(o Outcome) aimd.Outcome {
	switch o {
	case Answered:
		return aimd.Success
	case RateLimited:
		return aimd.RateLimited
	case Timeout:
		return aimd.Timeout
	}
	return aimd.Failure
}
