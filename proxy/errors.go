package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

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
)

// maxRetryAfterSeconds is the longest Retry-After Governor sends: the
// longest every official SDK version honours.
const maxRetryAfterSeconds = 60

// apiError is an error of Governor's own, as opposed to an upstream answer
// passed through.
type apiError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter int // seconds; 0 = no Retry-After header
	// Final tells SDKs not to retry (x-should-retry: false): Governor has
	// already retried, or retrying cannot help.
	Final bool
}

type openAIErrorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError answers with e in the OpenAI error shape, or Anthropic's when
// anthropic is set.
func writeError(ctx *fasthttp.RequestCtx, anthropic bool, e apiError) {
	var body []byte
	if anthropic {
		var b anthropicErrorBody
		b.Type = "error"
		b.Error.Type = "governor_error"
		b.Error.Message = e.Message
		body, _ = json.Marshal(b)
	} else {
		var b openAIErrorBody
		b.Error.Message = e.Message
		b.Error.Type = "governor_error"
		b.Error.Code = e.Code
		body, _ = json.Marshal(b)
	}
	resp := &ctx.Response
	resp.ResetBody()
	resp.SetStatusCode(e.Status)
	resp.Header.SetContentType("application/json")
	if e.RetryAfter > 0 {
		resp.Header.Set("Retry-After", strconv.Itoa(min(e.RetryAfter, maxRetryAfterSeconds)))
	}
	if e.Final {
		resp.Header.Set("X-Should-Retry", "false")
	}
	resp.SetBody(body)
}

// CodeClientClosed marks a call whose client left before its answer.
const CodeClientClosed = "client_closed"
