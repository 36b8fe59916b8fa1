package batch_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/proxy"
)

// An item answered with a redirect got no answer to its call: Governor
// follows none (the item's credentials would go to another host), so the
// item is FAILED, as one answered 4xx is, after one attempt, its error
// naming the redirect and where it led, and its details keeping the
// provider's answer.
func TestItemAnsweredWithARedirectFails(t *testing.T) {
	t.Parallel()
	checkLeaks(t) // first: the provider's goroutines end before the check
	var moved atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Request-Id") == "moved" {
			moved.Add(1)
			w.Header().Set("Location", "https://elsewhere.example/v1/chat/completions")
			w.WriteHeader(http.StatusTemporaryRedirect)
			_, _ = io.WriteString(w, `{"moved":true}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"ok"}`)
	}))
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	require.NoError(t, err)
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.Upstream, c.Routes = u, nil }})

	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("moved", "x", map[string]string{"X-Request-Id": "moved"}),
		chatItem("ok", "y", nil),
	}}))
	d := doc.Details[0]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, []string{"307 Temporary Redirect to https://elsewhere.example/v1/chat/completions: redirects are not followed"}, d.Errors)
	assert.Equal(t, 307, d.StatusCode)
	require.NotNil(t, d.Response, "the redirect is kept as the item's answer")
	assert.Equal(t, 307, d.Response.StatusCode)
	assert.JSONEq(t, `{"moved":true}`, string(d.Response.Body))
	assert.JSONEq(t, "null", string(doc.Outputs[0]), "a failed item's output is the fallback")
	assert.Equal(t, proxy.StatusCompleted, doc.Details[1].Status)
	assert.Equal(t, 1, doc.Summary.Failed)
	assert.Equal(t, 1, doc.Summary.Completed)
	assert.EqualValues(t, 1, moved.Load(), "never retried")
}

// A redirect's error says where it led, as a user needs to fix the item's
// URL or the route, but never a credential the Location carries: its
// userinfo, query and fragment are left out ("?…" for a query).
func TestRedirectErrorNamesLocationWithoutSecrets(t *testing.T) {
	t.Parallel()
	checkLeaks(t) // first: the provider's goroutines end before the check
	locations := map[string]string{
		"full":      "https://elsewhere.example/v1/chat/completions",
		"userinfo":  "https://user:sk-secret1@elsewhere.example/v1/x",
		"query":     "https://elsewhere.example/v1/x?api-key=sk-secret2&b=1",
		"fragment":  "https://elsewhere.example/v1/x#access_token=sk-secret3",
		"relative":  "/v2/chat/completions",
		"none":      "",
		"not a URL": "http://[::1",
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if loc := locations[r.Header.Get("X-Case")]; loc != "" {
			w.Header().Set("Location", loc)
		}
		w.WriteHeader(http.StatusMovedPermanently)
	}))
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	require.NoError(t, err)
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.Upstream, c.Routes = u, nil }})

	cases := []string{"full", "userinfo", "query", "fragment", "relative", "none", "not a URL"}
	var items []any
	for _, c := range cases {
		items = append(items, chatItem(c, "x", map[string]string{"X-Case": c}))
	}
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": items}))
	want := map[string]string{
		"full":      "301 Moved Permanently to https://elsewhere.example/v1/chat/completions: redirects are not followed",
		"userinfo":  "301 Moved Permanently to https://elsewhere.example/v1/x: redirects are not followed",
		"query":     "301 Moved Permanently to https://elsewhere.example/v1/x?…: redirects are not followed",
		"fragment":  "301 Moved Permanently to https://elsewhere.example/v1/x: redirects are not followed",
		"relative":  "301 Moved Permanently to /v2/chat/completions: redirects are not followed",
		"none":      "301 Moved Permanently: redirects are not followed",
		"not a URL": "301 Moved Permanently to (a Location that is not a URL): redirects are not followed",
	}
	for i, c := range cases {
		d := doc.Details[i]
		assert.Equal(t, proxy.StatusFailed, d.Status, c)
		assert.Equal(t, []string{want[c]}, d.Errors, c)
		assert.NotContains(t, mustJSON(t, d), "sk-secret", c)
	}
}
