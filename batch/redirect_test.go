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
// naming the redirect and its details keeping the provider's answer.
func TestItemAnsweredWithARedirectFails(t *testing.T) {
	t.Parallel()
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
	assert.Equal(t, []string{"307 Temporary Redirect: redirects are not followed"}, d.Errors)
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
