package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Route sends calls whose path starts with /Name/ to URL, with the /Name
// prefix stripped: with the route anthropic=https://api.anthropic.com,
// /anthropic/v1/messages goes to https://api.anthropic.com/v1/messages.
type Route struct {
	Name string
	URL  *url.URL
}

// ParseRoutes parses a comma-separated list of name=url pairs. An empty
// string is no routes. Names are lower-case letters, digits, '-', '_' and
// '.', unique, and not "governor" (the prefix of Governor's own API).
func ParseRoutes(s string) ([]Route, error) {
	var routes []Route
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		shown := redactUserinfo(item) // errors are printed: never the credentials of a url
		name, raw, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("route %q: want name=url", shown)
		}
		name = strings.TrimSpace(name)
		if err := validRouteName(name); err != nil {
			return nil, fmt.Errorf("route %q: %w", shown, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("route %q: duplicate name %q", shown, name)
		}
		seen[name] = true
		u, err := ParseUpstreamURL(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", shown, err)
		}
		routes = append(routes, Route{Name: name, URL: u})
	}
	return routes, nil
}

func validRouteName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	if name == "governor" {
		return fmt.Errorf("name %q is reserved for Governor's own API", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("name %q: use lower-case letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}

// ParseUpstreamURL parses an upstream base URL: absolute http or https, with
// a host, optionally a base path, and no query, fragment or credentials.
func ParseUpstreamURL(s string) (*url.URL, error) {
	shown := redactUserinfo(s) // errors are printed: never the credentials of a url
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the url it repeats
		}
		if shown != s {
			err = errors.New("malformed url") // the details could quote the credentials
		}
		return nil, fmt.Errorf("invalid url %q: %w", shown, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("invalid url %q: scheme must be http or https", shown)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("invalid url %q: no host", shown)
	case u.User != nil:
		return nil, fmt.Errorf("invalid url %q: credentials belong in request headers, not the url", shown)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("invalid url %q: no query or fragment allowed", shown)
	}
	return u, nil
}

// redactUserinfo hides what may be credentials in a url shown in an
// error: everything between the scheme and the last '@'. It works on
// strings that do not parse as urls, and errs on the side of hiding.
func redactUserinfo(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s[:at], "://"); i >= 0 {
		start = i + len("://")
	} else if i := strings.IndexByte(s[:at], '='); i >= 0 {
		start = i + 1 // a route's name=url
	}
	return s[:start] + "REDACTED" + s[at:]
}

// router maps a request path to its upstream and the path to send there.
type router struct {
	def    *upstream
	byName map[string]*upstream
}

// resolve returns the upstream for path and the path without its route
// prefix. path is the normalized request path.
func (r *router) resolve(path []byte) (*upstream, []byte) {
	if len(path) > 1 && path[0] == '/' {
		seg, rest, found := bytes.Cut(path[1:], []byte{'/'})
		if up, ok := r.byName[string(seg)]; ok {
			if !found {
				return up, []byte{'/'}
			}
			return up, path[1+len(seg):][:len(rest)+1]
		}
	}
	return r.def, path
}
