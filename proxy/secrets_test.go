package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upstream URL that carries credentials is refused, and the error —
// printed at startup, so kept in logs — never repeats them, whatever else
// is wrong with the URL.
func TestURLCredentialsAreNeverEchoed(t *testing.T) {
	const secret = "sk-canary-url-3e9a"
	for _, s := range []string{
		"https://user:" + secret + "@example.com",
		"ftp://user:" + secret + "@example.com",
		"http://user:" + secret + "@",
		"http://user:" + secret + "@example.com?q=1",
		"http://user:" + secret + "@example.com:bad:port",
		"http://user:" + secret + "@[::1",
		"http://user:" + secret + "@example.com/%zz",
		"user:" + secret + "@example.com",
		"http://" + secret + "@example.com",
		"http://user:" + secret + "/x@example.com",
	} {
		_, err := ParseUpstreamURL(s)
		require.Error(t, err, s)
		assert.NotContains(t, err.Error(), secret, s)
		_, err = ParseRoutes("r=" + s)
		require.Error(t, err, s)
		assert.NotContains(t, err.Error(), secret, s)
		_, err = ParseRoutes("r=" + s + ",r=http://x")
		require.Error(t, err, s)
		assert.NotContains(t, err.Error(), secret, s)
	}
	// The rest of the message still says what is wrong.
	_, err := ParseUpstreamURL("ftp://user:" + secret + "@example.com")
	assert.ErrorContains(t, err, "scheme must be http or https")
	assert.ErrorContains(t, err, "example.com")
}

func FuzzURLCredentialsAreNeverEchoed(f *testing.F) {
	f.Add("https", "sk-canary-0123", "example.com")
	f.Add("ftp", "secretsecret", "x/%zz")
	f.Add("http", "pa55word99", "[::1")
	f.Add("", "hunter2hunter2", "host:bad:port?q")
	f.Fuzz(func(t *testing.T, scheme, secret, rest string) {
		if len(secret) < 8 || strings.ContainsFunc(secret, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
		}) || strings.Contains(strconv.Quote(scheme)+strconv.Quote(rest), secret) ||
			strings.Contains("invalid url scheme must be http or https no host credentials belong in request headers, not the url query or fragment allowed route want name=url duplicate", secret) {
			return
		}
		s := "user:" + secret + "@" + rest
		if scheme != "" {
			s = scheme + "://" + s
		}
		if _, err := ParseUpstreamURL(s); err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("%q: %v", s, err)
		}
		if _, err := ParseRoutes("r=" + s); err != nil && strings.Contains(err.Error(), secret) {
			t.Fatalf("route %q: %v", s, err)
		}
	})
}
