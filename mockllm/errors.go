package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// shape is the error body format of a route.
type shape int

const (
	shapeOpenAI shape = iota
	shapeAnthropic
)

// apiError is an error answer, written in the shape of the route.
type apiError struct {
	status int
	// typ is the OpenAI error type, anthropicType Anthropic's.
	typ           string
	anthropicType string
	code          string
	message       string
	// anthropicMessage, if set, replaces message in Anthropic's shape.
	anthropicMessage string
	// anthropicOnly forces Anthropic's shape on every route (529).
	anthropicOnly bool
}

type openAIErrorBody struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type anthropicErrorBody struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e apiError) body(sh shape) []byte {
	var v any
	if sh == shapeAnthropic || e.anthropicOnly {
		msg := e.message
		if e.anthropicMessage != "" {
			msg = e.anthropicMessage
		}
		v = anthropicErrorBody{Type: "error", Error: anthropicErrorDetail{Type: e.anthropicType, Message: msg}}
	} else {
		var code *string
		if e.code != "" {
			code = &e.code
		}
		v = openAIErrorBody{Error: openAIErrorDetail{Message: e.message, Type: e.typ, Code: code}}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings always marshal
	}
	return b
}

func errInvalid(code, message string) apiError {
	return apiError{status: http.StatusBadRequest, typ: "invalid_request_error", anthropicType: "invalid_request_error", code: code, message: message}
}

func errNotFound(r *http.Request) apiError {
	return apiError{
		status: http.StatusNotFound, typ: "invalid_request_error", anthropicType: "not_found_error", code: "unknown_url",
		message: "Unknown request URL: " + r.Method + " " + r.URL.Path + ". Please check the URL for typos.",
	}
}

func errMethod(r *http.Request) apiError {
	return apiError{
		status: http.StatusMethodNotAllowed, typ: "invalid_request_error", anthropicType: "invalid_request_error", code: "method_not_allowed",
		message: "Method " + r.Method + " is not allowed on " + r.URL.Path + ".",
	}
}

func errTooLarge() apiError {
	return apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", anthropicType: "request_too_large", code: "request_too_large", message: "Request body is too large."}
}

func errCapacity() apiError {
	return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", anthropicType: "rate_limit_error", code: "rate_limit_exceeded", message: "Too many concurrent requests (simulated concurrency limit)."}
}

func errRate() apiError {
	return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", anthropicType: "rate_limit_error", code: "rate_limit_exceeded", message: "Rate limit reached for requests (simulated token bucket)."}
}

// statusError is the error answer a forced or random fault gives for status.
func statusError(status int, quota bool) apiError {
	const sim = " (simulated by mockllm)"
	switch {
	case status == http.StatusTooManyRequests && quota:
		return apiError{status: status, typ: "insufficient_quota", anthropicType: "rate_limit_error", code: "insufficient_quota", message: "You exceeded your current quota, please check your plan and billing details." + sim}
	case status == http.StatusTooManyRequests:
		return apiError{status: status, typ: "rate_limit_error", anthropicType: "rate_limit_error", code: "rate_limit_exceeded", message: "Rate limit reached for requests." + sim}
	case status == statusOverloaded:
		return apiError{status: status, anthropicType: "overloaded_error", message: "Overloaded" + sim, anthropicOnly: true}
	case status == http.StatusBadRequest:
		return apiError{status: status, typ: "invalid_request_error", anthropicType: "invalid_request_error", code: "invalid_request", message: "Invalid request." + sim}
	case status == http.StatusUnauthorized:
		return apiError{status: status, typ: "invalid_request_error", anthropicType: "authentication_error", code: "invalid_api_key", message: "Incorrect API key provided." + sim}
	case status == http.StatusServiceUnavailable:
		return apiError{status: status, typ: "server_error", anthropicType: "api_error", code: "service_unavailable", message: "The server is overloaded or not ready yet." + sim}
	case status == http.StatusGatewayTimeout:
		return apiError{status: status, typ: "server_error", anthropicType: "timeout_error", code: "gateway_timeout", message: "Gateway timeout." + sim}
	case status == http.StatusBadGateway:
		return apiError{status: status, typ: "server_error", anthropicType: "api_error", code: "bad_gateway", message: "Bad gateway." + sim}
	default:
		return apiError{status: status, typ: "server_error", anthropicType: "api_error", code: "server_error", message: "The server had an error while processing your request." + sim}
	}
}

// overloadError is the answer of an overloaded provider in the shape of a
// route: Anthropic's 529 overloaded_error, OpenAI's 503.
func overloadError(sh shape) apiError {
	if sh == shapeAnthropic {
		return statusError(statusOverloaded, false)
	}
	return statusError(http.StatusServiceUnavailable, false)
}

// statusOverloaded is Anthropic's 529 Overloaded.
const statusOverloaded = 529

// writeBody writes a complete JSON answer with its length.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that left is noticed by the caller's context
}
