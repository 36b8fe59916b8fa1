package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// Fuzz targets for every parser of input that reaches Governor from a
// client or a provider. Seed corpora live in testdata/fuzz; `go test` runs
// them as ordinary tests.

func FuzzMaxRetries(f *testing.F) {
	for _, s := range []string{"", "0", "3", "-1", "x", "1000", "99999999999999999999", "+5", " 2", "0x10", "1e3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const def = 7
		n, err := maxRetriesOf([]byte(v), def)
		parsed, perr := strconv.Atoi(v)
		switch {
		case v == "":
			if err != nil || n != def {
				t.Fatalf("absent X-Governor-Max-Retries gave %d, %v; want the default %d", n, err, def)
			}
		case perr != nil || parsed < 0 || parsed > MaxRetriesCeiling:
			if err == nil {
				t.Fatalf("X-Governor-Max-Retries %q gave %d, want an error", v, n)
			}
		case err != nil || n != parsed:
			t.Fatalf("X-Governor-Max-Retries %q gave %d, %v; want %d", v, n, err, parsed)
		}
	})
}

func FuzzTenant(f *testing.F) {
	for _, s := range []string{"", "team-a", "job:1@x", "a b", "(other)", strings.Repeat("t", 64), strings.Repeat("t", 65), "é", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		name, err := tenantOf([]byte(v))
		switch {
		case v == "":
			if err != nil || name != DefaultTenant {
				t.Fatalf("absent %s gave %q, %v; want %q", HeaderTenant, name, err, DefaultTenant)
			}
		case err != nil:
			if ValidateTenant(v) == nil {
				t.Fatalf("%s %q refused (%v), but it is valid", HeaderTenant, v, err)
			}
		default:
			if name != v || len(name) > MaxTenantLen || strings.ContainsAny(name, " ()/\\\x00\n") {
				t.Fatalf("%s %q gave %q", HeaderTenant, v, name)
			}
		}
	})
}

// FuzzRateLimitHeaders reads a provider's request-budget headers, however
// malformed: the budget read is one a lane's pacer accepts (see
// lane.FuzzPacer for what the pacer does with it).
func FuzzRateLimitHeaders(f *testing.F) {
	for _, s := range [][4]string{
		{"10", "0", "900ms", ""}, {"10000", "9999", "6ms", ""}, {"1", "0", "24h", ""}, {"1e-300", "0", "1s", ""},
		{"1e308", "0", "1ns", ""}, {"NaN", "NaN", "NaN", ""}, {"-1", "5", "1s", ""}, {"5", "10", "-1s", ""},
		{"lots", "", "", ""}, {"", "", "", "2026-01-01T00:00:10Z"}, {"Inf", "0", "1s", ""}, {"10", "0", "2562047h", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, limit, remaining, reset, anthropicReset string) {
		for _, anthropic := range []bool{false, true} {
			var h fasthttp.ResponseHeader
			if anthropic {
				h.Set("Anthropic-Ratelimit-Requests-Limit", limit)
				h.Set("Anthropic-Ratelimit-Requests-Remaining", remaining)
				h.Set("Anthropic-Ratelimit-Requests-Reset", anthropicReset)
			} else {
				h.Set("X-Ratelimit-Limit-Requests", limit)
				h.Set("X-Ratelimit-Remaining-Requests", remaining)
				h.Set("X-Ratelimit-Reset-Requests", reset)
			}
			v := peekBudget(&h)
			for i, name := range budgetHeaders {
				if string(v[i]) != string(h.Peek(name)) {
					t.Fatalf("%q %q %q %q: %s is %q, Peek says %q", limit, remaining, reset, anthropicReset, name, v[i], h.Peek(name))
				}
			}
			b, ok := rateLimitHeaders(&h, now)
			if ok && !(b.Valid() && b.Remaining <= b.Limit && b.Reset <= maxHint) {
				t.Fatalf("%q %q %q %q: budget %+v", limit, remaining, reset, anthropicReset, b)
			}
		}
	})
}

func FuzzParseRoutes(f *testing.F) {
	for _, s := range []string{
		"", "anthropic=https://api.anthropic.com", "a=http://x, b=https://y:8443/base/", "a", "Bad=http://x",
		"a=http://x,a=http://y", "governor=http://x", "a=ftp://x", "a=http://user:sk-secret@x", "a=http://x?q=1",
		"a=http://", "a=http://[::1]:80/p", "a=http://x#f", ",,a=http://x,,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		routes, err := ParseRoutes(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range routes {
			if validRouteName(r.Name) != nil || seen[r.Name] {
				t.Fatalf("%q: accepted route name %q", s, r.Name)
			}
			seen[r.Name] = true
			u := r.URL
			if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				t.Fatalf("%q: accepted route url %q", s, u)
			}
		}
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		`{"error":{"code":"rate_limit_exceeded"}}`, `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`,
		`{"type":"error","error":{"type":"overloaded_error"}}`, `{"error":{"code":5}}`, `{"error":{"code":1e400}}`,
		`{"error":"x"}`, `not json`, ``, `{"error":{"code":"` + strings.Repeat("c", 100) + `"}}`,
	} {
		f.Add(429, []byte(s))
		f.Add(500, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		o := classifyStatus(status, body)
		if o > lane.ClientGone {
			t.Fatalf("%d %q: outcome %d", status, body, o)
		}
		if status != 429 && status != 529 && status < 500 && o != lane.Answered {
			t.Fatalf("%d %q: %s", status, body, o)
		}
		e := attemptError(o, status, body, nil, time.Second)
		if len(e) > 300 || strings.ContainsAny(e, "\r\n") && !strings.ContainsAny(string(body), "\r\n") {
			t.Fatalf("%d %q: attempt error %q", status, body, e)
		}
	})
}
