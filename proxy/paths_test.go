package proxy

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/rawupstream"
)

// rawUpstream is an upstream that records the raw request line of every
// request it gets and answers 200. It speaks HTTP by hand so that it sees
// exactly the bytes Governor sends, malformed or not.
func rawUpstream(t *testing.T) (addr string, lines <-chan string) {
	t.Helper()
	got := make(chan string, 64)
	addr = rawupstream.Start(t, func(c *net.TCPConn, line string, _ int) {
		got <- strings.TrimSuffix(line, "\r\n")
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return addr, got
}

// The path a client sends arrives at the upstream meaning what it meant:
// escaped characters stay escaped instead of becoming syntax of the request
// line (a query, a fragment, a second request line), and an escaped "%"
// cannot turn into a dot-segment that climbs out of a route's base path.
func TestUpstreamPathKeepsItsEscapes(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, "http://"+upAddr+"/anthropic-base")}}}))
	addr := strings.TrimPrefix(base, "http://")
	for _, tc := range []struct{ path, want string }{
		{"/v1/chat/completions?a=1&b=%2F", "/v1/chat/completions?a=1&b=%2F"},
		{"/v1/a%3Fb=c", "/v1/a%3Fb=c"},                               // an escaped "?" is not a query
		{"/v1/a%23frag", "/v1/a%23frag"},                             // nor "#" a fragment
		{"/v1/a%20b", "/v1/a%20b"},                                   // nor a space the end of the target
		{"/v1/x%0D%0AInjected:%20yes", "/v1/x%0D%0AInjected:%20yes"}, // nor CR LF the end of the line
		{"/v1/%00", "/v1/%00"},
		{"/anthropic/%252e%252e/x", "/anthropic-base/%252e%252e/x"}, // "%2e%2e" as data, not ".."
		{"/anthropic/v1/messages", "/anthropic-base/v1/messages"},
		{"/anthropic/%2e%2e/x", "/x"}, // a real dot-segment is resolved, on the default upstream
		{"/v1/models/org:model@v1;x=y,z!$&'()*+~", "/v1/models/org:model@v1;x=y,z!$&'()*+~"},
		{"/v1/caf%C3%A9", "/v1/caf%C3%A9"},
	} {
		out := rawExchange(t, addr, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.Contains(t, out, "HTTP/1.1 200", tc.path)
		line := <-lines
		assert.Equal(t, "GET "+tc.want+" HTTP/1.1", line, tc.path)
	}
}

// FuzzUpstreamRequest checks, for any request target a client can send,
// that the request built for the upstream goes to the configured host,
// under the route's base path, with a request line that parses back to the
// path Governor routed.
func FuzzUpstreamRequest(f *testing.F) {
	for _, s := range []string{
		"/v1/chat/completions", "/anthropic/v1/messages?beta=true", "/anthropic/../x", "/anthropic/%2e%2e/x",
		"/anthropic/%252e%252e/x", "/v1/a%3Fb", "/v1/a%20b%0d%0aX:%20y", "//evil.example/x", "http://evil.example/x",
		"/anthropic", "/anthropic/", "*", "/v1/caf%C3%A9", "/%zz", "/a/./b/../../../c", "/anthropic\\..\\x",
	} {
		f.Add(s)
	}
	def := newTestUpstream("default", "https://api.example.com")
	anth := newTestUpstream("anthropic", "http://127.0.0.1:9/anthropic-base/")
	r := router{def: def, byName: map[string]*upstream{"anthropic": anth}}
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			// The front answers 400 to a request line with these, and
			// ValidatePath refuses them in a batch item's url.
			return
		}
		in := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(in)
		in.SetRequestURI(target)
		up, path := r.resolve(in.URI().Path())
		out := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(out)
		buildUpstreamRequest(in, up, path, out)
		out.URI().DisablePathNormalizing = true // as the upstream client sends it
		if string(out.URI().Host()) != up.host || string(out.Header.Host()) != up.host {
			t.Fatalf("%q: sent to host %q (Host %q), want %q", target, out.URI().Host(), out.Header.Host(), up.host)
		}
		ru := string(out.URI().RequestURI())
		if strings.ContainsAny(ru, " \r\n\t\x00#") {
			t.Fatalf("%q: request target %q has bytes that end or break the request line", target, ru)
		}
		u, err := url.ParseRequestURI(ru)
		if err != nil {
			t.Fatalf("%q: request target %q does not parse: %v", target, ru, err)
		}
		want := up.basePath + string(path)
		if unescaped, _ := url.PathUnescape(up.basePath); u.Path != unescaped+string(path) {
			t.Fatalf("%q: upstream decodes path %q, want %q", target, u.Path, want)
		}
		if u.RawQuery != string(in.URI().QueryString()) {
			t.Fatalf("%q: query %q, want %q", target, u.RawQuery, in.URI().QueryString())
		}
		for seg := range strings.SplitSeq(u.Path, "/") {
			if seg == ".." {
				t.Fatalf("%q: upstream path %q climbs with ..", target, u.Path)
			}
		}
	})
}

func newTestUpstream(name, raw string) *upstream {
	u, err := ParseUpstreamURL(raw)
	if err != nil {
		panic(err)
	}
	cfg, err := (&Config{Upstream: u, Metrics: newSet()}).withDefaults()
	if err != nil {
		panic(err)
	}
	return newUpstream(name, u, &cfg)
}

// A batch item's url travels the same way: escapes survive, and a url that
// would break the request line runs nothing.
func TestCallPathKeepsItsEscapes(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	p, _ := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr)}))
	res := p.Do(context.Background(), &Call{Path: "/v1/a%3Fb%20c?x=%23"})
	require.Nil(t, res.Err)
	assert.Equal(t, 200, res.StatusCode)
	assert.Equal(t, "POST /v1/a%3Fb%20c?x=%23 HTTP/1.1", <-lines)
	for _, path := range []string{"/v1/x?a b", "/v1/x y", "/v1/x?a\tb", "/v1/x\r\nX: y"} {
		res := p.Do(context.Background(), &Call{Path: path})
		require.NotNil(t, res.Err, path)
		assert.Equal(t, 400, res.Err.Status, path)
		assert.Equal(t, StatusDidNotRun, res.Details.Status, path)
	}
	assert.Empty(t, lines, "no refused url reached the upstream")
}
