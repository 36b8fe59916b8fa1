package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// statusOverloaded is Anthropic's 529 "overloaded".
const statusOverloaded = 529

// classifyStatus classifies an answer by its status code and, for a 429,
// its error body: exhausted quota, and a call larger than the whole token
// budget, are final.
func classifyStatus(status int, body []byte) lane.Outcome {
	switch status {
	case http.StatusTooManyRequests:
		if isQuotaError(body) || isTooLarge(body) {
			return lane.Quota
		}
		return lane.RateLimited
	case statusOverloaded:
		return lane.RateLimited
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return lane.ServerError
	}
	return lane.Answered
}

// errUnreadableHead replaces fasthttp's error for an upstream head it could
// not parse or that did not fit its buffer: that error quotes the head's
// bytes, which must not reach a client's error body or the details.
var (
	errUnreadableHead = errors.New("malformed response head")
	errOversizedHead  = fmt.Errorf("response head larger than %d bytes", responseHeaderBufferSize)
)

// errUnaskedUpgrade is an upstream's "101 Switching Protocols" to a
// request that asked for no upgrade (see upstream.send): no answer.
var errUnaskedUpgrade = errors.New("101 Switching Protocols to a request that asked for no upgrade")

// scrubHeadError returns err, or, when err is fasthttp's complaint about
// the bytes of an upstream head (rather than a connection's failure), an
// error that says what was wrong without quoting them.
func scrubHeadError(err error) error {
	if errors.Is(err, errBareLFAnswer) {
		return errBareLFAnswer
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		return errOversizedHead
	}
	var netErr net.Error
	var errno syscall.Errno
	if errors.As(err, &netErr) || errors.As(err, &errno) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, fasthttp.ErrTimeout) {
		return err
	}
	if strings.Contains(err.Error(), "error when reading response headers") {
		return errUnreadableHead
	}
	return err
}

// errNoConn is the error of an attempt whose request never reached a
// connection to its upstream: none came free, or none opened, before the
// attempt's deadline or the connect timeout (see unsent).
var errNoConn = errors.New("no connection to the upstream in time")

// unsent returns the error of an attempt that got no answer, err, saying
// so when its request was never handed to a connection (resp tells: see
// handedAt). The provider never saw such an attempt: whatever its
// deadline, it is a connection error, never a timeout, which the
// controller would read as the provider being slow.
func unsent(resp *fasthttp.Response, err error) error {
	if _, handed := handedAt(resp); handed {
		return err
	}
	if errors.Is(err, fasthttp.ErrNoFreeConns) || classifyErr(err) == lane.Timeout {
		return fmt.Errorf("%w: %w", errNoConn, err)
	}
	return err
}

// classifyErr classifies an attempt that got no answer.
func classifyErr(err error) lane.Outcome {
	var netErr net.Error
	if errors.Is(err, errNoConn) {
		return lane.ConnError
	}
	if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &netErr) && netErr.Timeout() {
		return lane.Timeout
	}
	return lane.ConnError
}

// quotaMarkers are error codes and types that providers use for a 429 that
// waiting will not fix: the account is out of credit or over its spend
// limit. OpenAI: insufficient_quota, billing_hard_limit_reached;
// Azure/OpenAI: enforced_spend_limit_reached; Google: RESOURCE_EXHAUSTED
// with a quota message is transient and not listed.
var quotaMarkers = [][]byte{
	[]byte("insufficient_quota"),
	[]byte("enforced_spend_limit_reached"),
	[]byte("billing_hard_limit_reached"),
	[]byte("billing_not_active"),
	[]byte("spend_limit_reached"),
}

func isQuotaError(body []byte) bool {
	for _, m := range quotaMarkers {
		if bytes.Contains(body, m) {
			return true
		}
	}
	return false
}

// errorCode extracts a short code from a provider's error body: OpenAI's
// error.code (or error.type), Anthropic's error.type. Empty if none.
func errorCode(body []byte) string {
	if len(body) == 0 || len(body) > 64<<10 {
		return ""
	}
	var e struct {
		Error struct {
			Code any    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	switch c := e.Error.Code.(type) {
	case string:
		if c != "" {
			return truncate(c, 64)
		}
	case float64:
		return strconv.FormatFloat(c, 'f', -1, 64)
	}
	return truncate(e.Error.Type, 64)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// attemptError is the short string a failed attempt leaves in its
// execution details: "429 rate_limit_exceeded", "timeout after 30s".
func attemptError(o lane.Outcome, status int, body []byte, err error, timeout time.Duration) string {
	switch o {
	case lane.Timeout:
		return "timeout after " + timeout.String()
	case lane.ConnError:
		return "connection error: " + truncate(err.Error(), 200)
	case lane.ClientGone:
		return "cut: " + truncate(err.Error(), 200)
	}
	if code := errorCode(body); code != "" {
		return strconv.Itoa(status) + " " + code
	}
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// retryAfter reads a provider's back-off hint from an answer: retry-after-ms
// (milliseconds, OpenAI and Anthropic), else retry-after (seconds or an HTTP
// date, RFC 9110 §10.2.3). It returns 0 when there is no usable hint.
// Nonsense values (negative, not a number, absurdly large) are ignored; the
// caller caps the result.
func retryAfter(h *fasthttp.ResponseHeader, now time.Time) time.Duration {
	if v := h.Peek("Retry-After-Ms"); len(v) > 0 {
		if d, ok := parseRetryAfterMs(v); ok {
			return d
		}
	}
	if v := h.Peek(fasthttp.HeaderRetryAfter); len(v) > 0 {
		if d, ok := parseRetryAfter(v, now); ok {
			return d
		}
	}
	return 0
}

// maxHint bounds any parsed hint before the caller's own cap, so that
// arithmetic on it cannot overflow.
const maxHint = 24 * time.Hour

func parseRetryAfterMs(v []byte) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	if err != nil || math.IsNaN(ms) || ms < 0 {
		return 0, false
	}
	if ms > float64(maxHint/time.Millisecond) {
		return maxHint, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

func parseRetryAfter(v []byte, now time.Time) (time.Duration, bool) {
	s := string(bytes.TrimSpace(v))
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 {
			return 0, false
		}
		if secs > maxHint.Seconds() {
			return maxHint, true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	t, err := http.ParseTime(s)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, true // a date in the past: retry now
	}
	return min(d, maxHint), true
}
