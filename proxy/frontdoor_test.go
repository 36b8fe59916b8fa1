package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A method no LLM API uses is refused at the door, in the error shape of
// the provider the path routes to, never forwarded: a TRACE forwarded to a
// provider that echoes it would hand the request's credentials to a page's
// script (cross-site tracing).
func TestMethodsNoLLMAPIUsesAreRefused(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, "http://"+upAddr+"/anthropic-base")}}}))
	addr := strings.TrimPrefix(base, "http://")
	for _, tc := range []struct{ raw, shape string }{
		{"TRACE /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-canary\r\n\r\n", `"type":"governor_error"`},
		{"TRACE /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-canary\r\n\r\n", `"type":"error","error":{"type":"governor_error"`},
		{"TRACE /governor/lanes HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`},
		{"TRACK /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`},
		{"PROPFIND /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", `"type":"governor_error"`},
		{"get /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", `"type":"governor_error"`}, // methods are case-sensitive
		{"TRACE /v1/models HTTP/1.0\r\n\r\n", `"type":"governor_error"`},
	} {
		out := rawExchange(t, addr, tc.raw)
		method, _, _ := strings.Cut(tc.raw, " ")
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 405 "), "%s: %.300q", method, out)
		assert.Contains(t, out, "\r\nAllow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n", method)
		if !strings.Contains(tc.raw, "anthropic") { // Anthropic's shape has no code
			assert.Contains(t, out, `"code":"method_not_allowed"`, method)
		}
		assert.Contains(t, out, tc.shape, "%s: %.300q", method, out)
		assert.Contains(t, out, "\r\nConnection: close\r\n", method)
		assert.NotContains(t, out, "sk-canary", method)
	}
	// The methods LLM APIs use still pass.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		out := rawExchange(t, addr, m+" /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), "%s: %.200q", m, out)
		assert.Equal(t, m+" /v1/x HTTP/1.1", <-lines, m)
	}
	assert.Empty(t, lines, "nothing else reached the provider")
}

// A client speaking HTTP/1.0 is forwarded in HTTP/1.1, Governor's own
// version: forwarded as HTTP/1.0, its call would close the upstream
// connection after each answer, and a stream would come back framed by
// that close alone.
func TestHTTP10CallsAreForwardedInHTTP11(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr)}))
	addr := strings.TrimPrefix(base, "http://")
	for _, raw := range []string{
		"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}",
	} {
		out := rawExchange(t, addr, raw)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.0 200 ") || strings.HasPrefix(out, "HTTP/1.1 200 "), "%.200q", out)
		assert.Equal(t, "POST /v1/chat/completions HTTP/1.1", <-lines, raw)
	}
}
