package proxy

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/lane"
)

// APIPrefix is the path prefix of Governor's own API on the main listener.
const APIPrefix = "/governor/"

// HeaderToken carries Config.APIToken on calls to Governor's own API.
const HeaderToken = "X-Governor-Token"

// HandleAPI registers h for a path under APIPrefix. A path ending in "/"
// matches every path it prefixes; other paths match exactly. HandleAPI must
// be called before Serve.
func (p *Proxy) HandleAPI(path string, h fasthttp.RequestHandler) {
	if !strings.HasPrefix(path, APIPrefix) {
		panic(fmt.Sprintf("proxy: API path %q is not under %s", path, APIPrefix))
	}
	if strings.HasSuffix(path, "/") {
		p.apiPrefix = append(p.apiPrefix, apiRoutePrefix{path, h})
		return
	}
	p.apiExact[path] = h
}

// HandlePublic registers h for exactly path, under APIPrefix, like
// HandleAPI but served without the X-Governor-Token header that
// Config.APIToken requires elsewhere: a browser cannot send a header when
// it opens a page. h must serve only what needs no guarding, such as a
// page's static files whose scripts call the API with the token. The
// match is exact even for a path ending in "/" (it prefixes nothing).
// HandlePublic must be called before Serve.
func (p *Proxy) HandlePublic(path string, h fasthttp.RequestHandler) {
	if !strings.HasPrefix(path, APIPrefix) || path == APIPrefix {
		panic(fmt.Sprintf("proxy: public path %q is not a path under %s", path, APIPrefix))
	}
	p.public[path] = h
}

type apiRoutePrefix struct {
	prefix string
	h      fasthttp.RequestHandler
}

func (p *Proxy) serveAPI(ctx *fasthttp.RequestCtx, path []byte) {
	if h, ok := p.public[string(path)]; ok {
		h(ctx)
		return
	}
	if p.cfg.APIToken == "" && reboundHost(ctx) {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusForbidden, Code: CodeHostNotAllowed,
			Message: "Governor's API on a loopback address answers no request for a domain name (DNS rebinding), unless " + p.cfg.Names.APIToken + " is set: use localhost or an IP address"})
		return
	}
	if crossOriginWrite(&ctx.Request.Header) {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusForbidden, Code: CodeCrossOrigin,
			Message: "Governor's API takes no request that changes something from a web page of another origin"})
		return
	}
	if p.cfg.APIToken != "" &&
		subtle.ConstantTimeCompare(ctx.Request.Header.Peek(HeaderToken), []byte(p.cfg.APIToken)) != 1 {
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusUnauthorized, Code: CodeUnauthorized,
			Message: "Governor's API requires the " + HeaderToken + " header"})
		return
	}
	if h, ok := p.apiExact[string(path)]; ok {
		h(ctx)
		return
	}
	for _, r := range p.apiPrefix {
		if bytes.HasPrefix(path, []byte(r.prefix)) {
			r.h(ctx)
			return
		}
	}
	p.writeError(ctx, false, apiError{Status: fasthttp.StatusNotFound, Code: CodeNotFound,
		Message: fmt.Sprintf("no Governor endpoint %s", path)})
}

// crossOriginWrite reports whether h is a browser's request that may
// change something (any method but GET and HEAD) sent by a page of another
// origin than Governor's. A page can have a browser send a POST with a
// form's Content-Type without asking first (no CORS preflight), so without
// this any page a user visited could start batches on a Governor on their
// machine. Clients other than browsers send neither header read here.
//
// Sec-Fetch-Site, which a page cannot set, decides when present: only
// "same-origin" and "none" (the user's own action) pass. Without it (older
// browsers), the Origin must name the host and port the request was sent
// to ("null", a sandboxed page or a file, names none).
func crossOriginWrite(h *fasthttp.RequestHeader) bool {
	if h.IsGet() || h.IsHead() {
		return false
	}
	if site := h.Peek("Sec-Fetch-Site"); len(site) > 0 {
		return !bytes.EqualFold(site, []byte("same-origin")) && !bytes.EqualFold(site, []byte("none"))
	}
	origin := h.Peek("Origin")
	if len(origin) == 0 {
		return false
	}
	u, err := url.Parse(string(origin))
	if err != nil || u.Host == "" {
		return true
	}
	host := string(h.Host())
	if strings.EqualFold(u.Host, host) {
		return false
	}
	// An origin leaves its scheme's default port out; a Host may not.
	port := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	return u.Port() != "" || port == "" || !strings.EqualFold(u.Host+":"+port, host)
}

// reboundHost reports whether ctx came on a loopback connection for a
// domain name: what a browser sends when a page's name was made to resolve
// to 127.0.0.1 (DNS rebinding), so that the page, same-origin in the
// browser's eyes, could read Governor's API (batch results, lanes) and
// write to it. Such a name is a domain the attacker controls, so it has a
// dot; an IP address, localhost, names under .localhost, names without a
// dot (an /etc/hosts alias) and no Host at all (HTTP/1.0) pass, as does
// any host on a connection that did not come over loopback. So do names
// under .internal, a top-level domain kept for private use that no
// attacker can point at 127.0.0.1 from the internet: a container reaches
// its host's loopback by one (Docker Desktop's host.docker.internal,
// Podman's host.containers.internal).
func reboundHost(ctx *fasthttp.RequestCtx) bool {
	if ip := ctx.LocalIP(); ip == nil || !ip.IsLoopback() {
		return false
	}
	host := string(ctx.Request.Header.Host())
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return strings.Contains(host, ".") && net.ParseIP(host) == nil &&
		!strings.HasSuffix(host, ".localhost") && !strings.HasSuffix(host, ".internal")
}

// serveLanes answers GET and HEAD /governor/lanes (RFC 9110 §9.1: a
// server that answers GET answers HEAD).
func (p *Proxy) serveLanes(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD")
		p.writeError(ctx, false, apiError{Status: fasthttp.StatusMethodNotAllowed, Code: CodeMethodNotAllowed, Message: "use GET or HEAD"})
		return
	}
	out := struct {
		Lanes []lane.Info `json:"lanes"`
		// Redis, with a Coordinator, says whether the lanes are
		// shared with the other Governors now (up) or governed here
		// alone until Redis answers again.
		Redis *redisStatus `json:"redis,omitempty"`
	}{Lanes: p.lanes.Info(p.cfg.Now())}
	if on, up := p.lanes.Coordinated(); on {
		out.Redis = &redisStatus{Up: up}
		if !up {
			out.Redis.Cause = p.lanes.CoordinationCause()
		}
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, out)
}

// redisStatus is the state of Redis coordination, as GET /governor/lanes
// shows it.
type redisStatus struct {
	Up bool `json:"up"`
	// Cause, while coordination is off, says why in a word: auth,
	// noperm, database, readonly, full, refused, timeout, tls, dns or
	// other (package coord's causes).
	Cause string `json:"cause,omitempty"`
}
