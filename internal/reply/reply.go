// Package reply writes the answers of Governor's own API: JSON bodies, and
// Governor's own errors in the OpenAI error shape
// {"error":{"message":…,"type":"governor_error","code":…}}, or Anthropic's
// on routes to Anthropic, so that an SDK reads them as it reads its
// provider's. Every handler of Governor, proxied call or API, answers
// through it.
package reply

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/valyala/fasthttp"
)

// MaxRetryAfter is the longest Retry-After Governor sends, in seconds: the
// longest every official SDK version honours.
const MaxRetryAfter = 60

// Error is an error of Governor's own, as opposed to a provider's answer
// passed through.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, in seconds, sets the Retry-After header (at most
	// MaxRetryAfter); 0 sends none.
	RetryAfter int
	// Final tells SDKs not to retry (x-should-retry: false): Governor has
	// already retried, or retrying cannot help.
	Final bool
}

type openAIBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

type anthropicBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteError answers ctx with e in the OpenAI error shape, or Anthropic's
// when anthropic is set.
func WriteError(ctx *fasthttp.RequestCtx, anthropic bool, e Error) {
	var body []byte
	if anthropic {
		var b anthropicBody
		b.Type = "error"
		b.Error.Type = "governor_error"
		b.Error.Message = e.Message
		body, _ = json.Marshal(b)
	} else {
		var b openAIBody
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
		resp.Header.Set("Retry-After", strconv.Itoa(min(e.RetryAfter, MaxRetryAfter)))
	}
	if e.Final {
		resp.Header.Set("X-Should-Retry", "false")
	}
	resp.SetBody(body)
}

// Raw returns e as a whole HTTP/1.1 response in the OpenAI error shape,
// with Connection: close: the answer of a connection refused before any
// request is read from it, written straight to the socket.
func Raw(e Error) []byte {
	var b openAIBody
	b.Error.Message = e.Message
	b.Error.Type = "governor_error"
	b.Error.Code = e.Code
	body, _ := json.Marshal(b)
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n",
		e.Status, fasthttp.StatusMessage(e.Status), len(body))
	if e.RetryAfter > 0 {
		out = fmt.Appendf(out, "Retry-After: %d\r\n", min(e.RetryAfter, MaxRetryAfter))
	}
	if e.Final {
		out = append(out, "X-Should-Retry: false\r\n"...)
	}
	out = append(out, "Connection: close\r\n\r\n"...)
	return append(out, body...)
}

// WriteJSON answers ctx with v as JSON, or with a 500 error if v cannot be
// encoded.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteError(ctx, false, Error{Status: fasthttp.StatusInternalServerError, Code: "internal", Message: err.Error()})
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
