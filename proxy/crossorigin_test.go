package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// A web page the user visits can send their browser's requests to a
// Governor on their machine (loopback, no token by default): a POST with
// a form's Content-Type needs no preflight, so the page could start
// batches there though it could read none of the answers. Governor's API
// refuses a request that changes something when a browser marks it as
// coming from another origin (Origin, Sec-Fetch-Site), and runs nothing;
// requests without those headers (curl, SDKs, the governor batch command)
// and the live page's own requests pass.
func TestAPIRefusesCrossOriginWrites(t *testing.T) {
	checkLeaks(t)
	_, up := newRecorder(t)
	p, err := New(fastRetries(Config{Upstream: mustURL(t, up), Metrics: metrics.NewSet()}))
	require.NoError(t, err)
	var ran atomic.Int32
	p.HandleAPI("/governor/batches", func(ctx *fasthttp.RequestCtx) { ran.Add(1) })
	base := serveProxy(t, p)
	c := client(t)

	send := func(method string, headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+"/governor/batches", strings.NewReader(`{"requests":[]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	for name, h := range map[string]map[string]string{
		"another site":          {"Origin": "https://evil.example"},
		"another port":          {"Origin": "http://127.0.0.1:1"},
		"an opaque origin":      {"Origin": "null"},
		"cross-site, no Origin": {"Sec-Fetch-Site": "cross-site"},
		"another site's page":   {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		"a same-site page":      {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
	} {
		for _, method := range []string{"POST", "DELETE"} {
			assert.Equal(t, http.StatusForbidden, send(method, h), "%s %s", method, name)
		}
	}
	assert.Zero(t, ran.Load(), "a refused request runs nothing")

	for name, h := range map[string]map[string]string{
		"no browser":         nil,
		"the same origin":    {"Origin": base, "Sec-Fetch-Site": "same-origin"},
		"typed in by a user": {"Sec-Fetch-Site": "none"},
		// A reverse proxy in front may have rewritten Host: the
		// browser's word decides.
		"the live page behind a proxy": {"Origin": "https://governor.example.com", "Sec-Fetch-Site": "same-origin"},
	} {
		assert.Equal(t, http.StatusOK, send("POST", h), name)
	}
	assert.Equal(t, int32(4), ran.Load())
	// Reading is not refused: without CORS headers, a page of another
	// origin cannot read the answer.
	assert.Equal(t, http.StatusOK, send("GET", map[string]string{"Origin": "https://evil.example"}))
}

// A page whose name an attacker made resolve to 127.0.0.1 (DNS rebinding)
// is same-origin in the browser's eyes: it could read batch results and
// lanes from a Governor on loopback without a token. On a loopback
// connection, Governor's API answers only requests for localhost or an IP
// address, unless a token guards it; forwarded calls are not concerned.
func TestAPIOnLoopbackRefusesOtherHostNames(t *testing.T) {
	checkLeaks(t)
	_, up := newRecorder(t)
	status := func(base, host string, headers ...string) string {
		t.Helper()
		raw := "GET /governor/lanes HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
		for _, h := range headers {
			raw += h + "\r\n"
		}
		out := rawExchange(t, strings.TrimPrefix(base, "http://"), raw+"\r\n")
		line, _, _ := strings.Cut(out, "\r\n")
		return line
	}

	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	port := base[strings.LastIndexByte(base, ':'):]
	for _, host := range []string{"attacker.example" + port, "attacker.example", "127.0.0.1.nip.io" + port} {
		assert.Equal(t, "HTTP/1.1 403 Forbidden", status(base, host), host)
	}
	// Names under .internal pass: nobody can point one at 127.0.0.1 from
	// the internet, and it is how a container reaches its host's loopback
	// (Docker Desktop's host.docker.internal, Podman's
	// host.containers.internal: governor batch -url in a container).
	for _, host := range []string{"localhost" + port, "LOCALHOST", "127.0.0.1" + port, "[::1]" + port, "app.localhost" + port, "10.1.2.3", "governor" + port,
		"host.docker.internal" + port, "host.containers.internal", "HOST.DOCKER.INTERNAL."} {
		assert.Equal(t, "HTTP/1.1 200 OK", status(base, host), host)
	}
	out := rawExchange(t, strings.TrimPrefix(base, "http://"),
		"POST /v1/chat/completions HTTP/1.1\r\nHost: attacker.example\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"model\":\"m\"}")
	assert.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), "a forwarded call: %s", out)

	// A token guards the API instead: a rebinding page cannot know it.
	_, base = startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), APIToken: "s3cret"}))
	assert.Equal(t, "HTTP/1.1 401 Unauthorized", status(base, "attacker.example"))
	assert.Equal(t, "HTTP/1.1 200 OK", status(base, "governor.example.com", HeaderToken+": s3cret"))
}
