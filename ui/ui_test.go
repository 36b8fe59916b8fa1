package ui

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/llmgovernor/governor/proxy"
)

// serve starts a Proxy with the page registered, on an in-memory listener,
// and returns a client of it.
func serve(t *testing.T, token string) *fasthttp.HostClient {
	t.Helper()
	up, err := url.Parse("http://127.0.0.1:1") // never reached: only /governor/* is asked for
	require.NoError(t, err)
	p, err := proxy.New(proxy.Config{Upstream: up, APIToken: token, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	Register(p)
	ln := fasthttputil.NewInmemoryListener()
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, p.Shutdown(context.Background()))
		require.NoError(t, <-done)
	})
	return &fasthttp.HostClient{Addr: "governor", Dial: func(string) (net.Conn, error) { return ln.Dial() }}
}

func get(t *testing.T, c *fasthttp.HostClient, method, path string, header ...string) *fasthttp.Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://governor" + path)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp := &fasthttp.Response{}
	if method == fasthttp.MethodHead {
		resp.SkipBody = true
	}
	require.NoError(t, c.Do(req, resp), "%s %s", method, path)
	return resp
}

func TestPageNeedsNoTokenButItsDataDoes(t *testing.T) {
	c := serve(t, "s3cret")

	page := get(t, c, "GET", Path)
	assert.Equal(t, fasthttp.StatusOK, page.StatusCode())
	assert.Equal(t, "text/html; charset=utf-8", string(page.Header.ContentType()))
	assert.Contains(t, string(page.Body()), "<title>Governor</title>")
	assert.Contains(t, string(page.Header.Peek("Content-Security-Policy")), "default-src 'none'")
	assert.Equal(t, "nosniff", string(page.Header.Peek("X-Content-Type-Options")))

	for _, path := range []string{proxy.APIPrefix + "lanes", proxy.APIPrefix + "ui/nothing.js"} {
		assert.Equal(t, fasthttp.StatusUnauthorized, get(t, c, "GET", path).StatusCode(), path)
	}
	assert.Equal(t, fasthttp.StatusOK, get(t, c, "GET", proxy.APIPrefix+"lanes", proxy.HeaderToken, "s3cret").StatusCode())
}

func TestPageIsTheSameWithAndWithoutToken(t *testing.T) {
	want, err := static.ReadFile("static/index.html")
	require.NoError(t, err)
	for _, token := range []string{"", "s3cret"} {
		body := get(t, serve(t, token), "GET", Path).Body()
		assert.Equal(t, string(want), string(body), "token %q", token)
		assert.NotContains(t, string(body), "s3cret")
	}
}

// The page's scripts and styles are served from the binary at the
// relative URLs index.html uses, and nothing is loaded from elsewhere.
func TestPageFiles(t *testing.T) {
	c := serve(t, "")
	index := string(get(t, c, "GET", Path).Body())
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(index, -1)
	want := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
	seen := map[string]bool{}
	for _, m := range refs {
		ref := m[1]
		if ref == "data:," { // the empty favicon: no request at all
			continue
		}
		require.Regexp(t, `^ui/[a-z]+\.(css|js)$`, ref, "every file is the page's own, at a relative URL")
		resp := get(t, c, "GET", proxy.APIPrefix+ref)
		assert.Equal(t, fasthttp.StatusOK, resp.StatusCode(), ref)
		ext := regexp.MustCompile(`\.[a-z]+$`).FindString(ref)
		assert.Equal(t, want[ext], string(resp.Header.ContentType()), ref)
		assert.NotEmpty(t, resp.Body(), ref)
		seen[ext] = true
	}
	assert.True(t, seen[".css"] && seen[".js"], "index.html loads its script and its styles: %v", refs)
}

func TestPageRevalidation(t *testing.T) {
	c := serve(t, "")
	first := get(t, c, "GET", Path)
	etag := string(first.Header.Peek(fasthttp.HeaderETag))
	require.NotEmpty(t, etag)
	assert.Equal(t, "no-cache", string(first.Header.Peek(fasthttp.HeaderCacheControl)))

	again := get(t, c, "GET", Path, fasthttp.HeaderIfNoneMatch, etag)
	assert.Equal(t, fasthttp.StatusNotModified, again.StatusCode())
	assert.Empty(t, again.Body())

	stale := get(t, c, "GET", Path, fasthttp.HeaderIfNoneMatch, `"other"`)
	assert.Equal(t, fasthttp.StatusOK, stale.StatusCode())
	assert.Equal(t, first.Body(), stale.Body())
}

func TestPageMethods(t *testing.T) {
	c := serve(t, "")
	head := get(t, c, "HEAD", Path)
	assert.Equal(t, fasthttp.StatusOK, head.StatusCode())
	assert.Equal(t, "text/html; charset=utf-8", string(head.Header.ContentType()))

	post := get(t, c, "POST", Path)
	assert.Equal(t, fasthttp.StatusMethodNotAllowed, post.StatusCode())
	assert.Equal(t, "GET, HEAD", string(post.Header.Peek(fasthttp.HeaderAllow)))
}

// The page's address typed with a slash at the end leads to the page, with
// or without a token, by a relative redirect that a path prefix keeps.
func TestTrailingSlashRedirectsToThePage(t *testing.T) {
	c := serve(t, "s3cret")
	resp := get(t, c, "GET", Path+"/")
	assert.Equal(t, fasthttp.StatusMovedPermanently, resp.StatusCode())
	loc := string(resp.Header.Peek(fasthttp.HeaderLocation))
	ref, err := url.Parse(loc)
	require.NoError(t, err)
	for _, page := range []string{"http://governor" + Path, "https://example.com/prefix" + Path} {
		base, err := url.Parse(page + "/")
		require.NoError(t, err)
		assert.Equal(t, page, base.ResolveReference(ref).String(), "Location %q from %s/", loc, page)
	}
}
