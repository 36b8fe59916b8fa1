package proxy

import "github.com/llmgovernor/governor/internal/reply"

// Codes of Governor's own errors, in the "code" field of the error body.
const (
	CodeUpstreamUnreachable = "upstream_unreachable"
	CodeUpstreamTimeout     = "upstream_timeout"
	CodeUpstreamBadResponse = "upstream_bad_response"
	CodeBodyTooLarge        = "request_too_large"
	CodeBadRequest          = "bad_request"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeQueueFull           = "queue_full"
	CodeTooManyLanes        = "too_many_lanes"
	CodeQueueTimeout        = "queue_timeout"
	CodeDraining            = "draining"
	CodeUnauthorized        = "unauthorized"
	// CodeCrossOrigin refuses a request to Governor's API that a web page
	// of another origin had a browser send.
	CodeCrossOrigin = "cross_origin"
	// CodeHostNotAllowed refuses a request to Governor's API on a
	// loopback address for a host name other than localhost (DNS
	// rebinding).
	CodeHostNotAllowed = "host_not_allowed"
	// CodeExceedsTokenBudget refuses a call that costs more tokens than
	// a whole token budget its provider reported: it could never run.
	CodeExceedsTokenBudget = "exceeds_token_budget"
	// CodeBuffersFull refuses a call whose body would take the request
	// bodies held beyond MaxBufferedBytes.
	CodeBuffersFull = "buffers_full"
	// CodeTooManyConnections refuses a connection beyond MaxConnections,
	// before any request is read from it.
	CodeTooManyConnections = "too_many_connections"
)

// apiError is an error of Governor's own, as opposed to an upstream answer
// passed through.
type apiError = reply.Error

// maxRetryAfterSeconds is the longest Retry-After Governor sends.
const maxRetryAfterSeconds = reply.MaxRetryAfter

// CodeClientClosed marks a call whose client left before its answer.
const CodeClientClosed = "client_closed"
