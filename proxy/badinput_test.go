package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A malformed Priority is ignored, as RFC 9218 asks: the call runs at the
// default urgency. A malformed X-Governor-Max-Retries, Governor's own
// header, is refused with 400 and nothing is sent upstream.
func TestMalformedGovernorHeaders(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxRetries: 2}))
	c := client(t)
	for i, tc := range []struct {
		priority, maxRetries string
		attempts             string // with every attempt answered 500
	}{
		{"u=99", "", "3"},
		{"u=-1, i", "", "3"},
		{`u="1"`, "2", "3"},
		{"u=1.5;x", "", "3"},
		{strings.Repeat("u=1,", 2000), "", "3"},
		{"u=\t\xff", "", "3"},
		{"u=0", "0", "1"},
		{"u=7", "1", "2"},
	} {
		id := fmt.Sprintf("malformed-priority-%d", i)
		resp, body := chat(t, c, base, map[string]string{"X-Request-Id": id, "Priority": tc.priority,
			HeaderMaxRetries: tc.maxRetries, "X-Mock-Fault": strings.TrimSuffix(strings.Repeat("500,", 4), ",")})
		assert.Equal(t, 500, resp.StatusCode, "Priority %q, max retries %q: %s", tc.priority, tc.maxRetries, body)
		assert.Equal(t, tc.attempts, resp.Header.Get(HeaderAttempts), "Priority %q, max retries %q", tc.priority, tc.maxRetries)
		assert.Equal(t, tc.attempts, itoa(mock.Stats().ByRequestID[id]), "Priority %q, max retries %q", tc.priority, tc.maxRetries)
	}
	for i, v := range []string{"-4", "abc", "99999999999999999999999", "1e3", "0x10", "101", "1000000"} {
		id := fmt.Sprintf("malformed-retries-%d", i)
		resp, body := chat(t, c, base, map[string]string{"X-Request-Id": id, HeaderMaxRetries: v})
		assert.Equal(t, 400, resp.StatusCode, "max retries %q: %s", v, body)
		assert.Contains(t, string(body), `"code":"bad_request"`, "max retries %q", v)
		assert.Contains(t, string(body), "X-Governor-Max-Retries: want a whole number of retries from 0 to 100", "max retries %q", v)
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "max retries %q", v)
		assert.Equal(t, string(StatusFailed), resp.Header.Get(HeaderStatus), "max retries %q", v)
		assert.Zero(t, mock.Stats().ByRequestID[id], "max retries %q: nothing is sent upstream", v)
	}
	// The most a call may ask for is accepted.
	resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": "most", HeaderMaxRetries: "100", "X-Mock-Fault": "500,500,ok"})
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get(HeaderAttempts))
}

// A provider's nonsense Retry-After or retry-after-ms never pauses a lane
// beyond MaxPause, and never crashes or stalls the call.
func TestAbsurdRetryHintsPauseAtMostMaxPause(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	const maxPause = 100 * time.Millisecond
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxPause: maxPause}))
	c := client(t)
	for i, tc := range []struct{ retryAfter, retryAfterMs string }{
		{"99999999999", ""},
		{"1e308", ""},
		{"Fri, 31 Dec 9999 23:59:59 GMT", ""},
		{"", "1e308"},
		{"", "9223372036854775807"},
		{"-5", "-5"},
		{"NaN", "NaN"},
		{"Inf", "+Inf"},
		{"soon", "later"},
		{"1, 2", "3 4"},
	} {
		key := fmt.Sprintf("Bearer key-%d", i) // a lane of its own, so each pause is seen alone
		before := time.Now()
		resp, body := chat(t, c, base, map[string]string{"Authorization": key, "X-Request-Id": fmt.Sprintf("hint-%d", i),
			"X-Mock-Fault": "429", mockllm.HeaderRetryAfter: tc.retryAfter, mockllm.HeaderRetryAfterMs: tc.retryAfterMs,
			HeaderMaxRetries: "0"})
		assert.Equal(t, 429, resp.StatusCode, "%+v: %s", tc, body)
		for _, l := range lanesOf(t, c, base) {
			if l.PausedUntil != nil {
				assert.LessOrEqual(t, l.PausedUntil.Sub(before), maxPause+time.Second, "%+v: lane %s paused until %v", tc, l.ID, l.PausedUntil)
			}
		}
		// The call told to wait retries after at most MaxPause and
		// succeeds.
		resp, body = chat(t, c, base, map[string]string{"Authorization": key, "X-Request-Id": fmt.Sprintf("hint-retry-%d", i),
			"X-Mock-Fault": "429,ok", mockllm.HeaderRetryAfter: tc.retryAfter, mockllm.HeaderRetryAfterMs: tc.retryAfterMs})
		assert.Equal(t, 200, resp.StatusCode, "%+v: %s", tc, body)
	}
	assert.Equal(t, int64(30), mock.Stats().Received)
}

// A provider whose request-budget headers announce a refill a day away (or
// nonsense) cannot hold the next call longer than MaxPause.
func TestAbsurdRequestBudgetPausesAtMostMaxPause(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	for _, budget := range [][3]string{{"1", "0", "24h"}, {"1e-300", "0", "1s"}, {"NaN", "NaN", "1s"}, {"2", "1", "2562047h"}} {
		rec, up := newRecorder(t)
		rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
			w.Header().Set("X-Ratelimit-Limit-Requests", budget[0])
			w.Header().Set("X-Ratelimit-Remaining-Requests", budget[1])
			w.Header().Set("X-Ratelimit-Reset-Requests", budget[2])
			io.WriteString(w, `{"ok":true}`)
		}
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxPause: 50 * time.Millisecond}))
		c := client(t)
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			resp, err := c.Do(req)
			require.NoError(t, err, "budget %v, call %d: held far beyond MaxPause", budget, i)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			cancel()
			assert.Equal(t, 200, resp.StatusCode, "budget %v, call %d", budget, i)
		}
	}
}

// Bodies over the limit, however framed, get 413; malformed framing gets
// 400; and whatever the client's framing, the upstream gets exactly the
// requests Governor answered, each framed by Governor.
func TestRequestFramingAbuse(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	got := make(chan string, 16)
	rec, up := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
		got <- r.Method + " " + r.URL.Path + " " + fmt.Sprint(r.ContentLength)
		io.WriteString(w, "ok")
	}
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBodyBytes: 1024}))
	addr := strings.TrimPrefix(base, "http://")
	var many strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&many, "X-H%d: v\r\n", i)
	}
	for _, tc := range []struct {
		name, raw string
		status    string   // of the first answer
		upstream  []string // what reached the provider
	}{
		{"chunked body over the limit",
			"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n800\r\n" + strings.Repeat("a", 2048) + "\r\n0\r\n\r\n",
			"413", nil},
		{"Content-Length over the limit, body never sent",
			"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\nConnection: close\r\n\r\n", "413", nil},
		{"two Content-Lengths", "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", "400", nil},
		{"negative Content-Length", "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\nConnection: close\r\n\r\n", "400", nil},
		{"Content-Length beyond int64", "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\nConnection: close\r\n\r\n", "400", nil},
		{"2000 headers", "GET /v1/x HTTP/1.1\r\nHost: x\r\n" + many.String() + "Connection: close\r\n\r\n", "431", nil},
		{"NUL in the method", "G\x00T /v1/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "400", nil},
		{"a folded value is unfolded and served",
			"POST /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", "200", []string{"POST /v1/x 2"}},
		// Transfer-Encoding wins over Content-Length (RFC 9112 §6.3): the
		// chunked body is empty and the call is served, but the connection
		// closes after its answer, so what follows is never read as a
		// request (a party on the way may have framed it the other way).
		{"Content-Length and chunked",
			"POST /v1/first HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			"200", []string{"POST /v1/first 0"}},
		{"CONNECT", "CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n", "405", nil},
		{"CONNECT to a path", "CONNECT /v1/x HTTP/1.1\r\nHost: x\r\n\r\n", "405", nil},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "405", nil},
		{"PRI to a path", "PRI /v1/x HTTP/1.1\r\nHost: x\r\n\r\n", "405", nil},
		{"HTTP/2.0", "GET /v1/x HTTP/2.0\r\nHost: x\r\n\r\n", "400", nil},
		{"HTTP/1.2", "POST /v1/x HTTP/1.2\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "400", nil},
		{"HTTP/0.9", "GET /v1/x HTTP/0.9\r\nHost: x\r\n\r\n", "400", nil},
	} {
		out := rawExchange(t, addr, tc.raw)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 "+tc.status+" "), "%s: %.200q", tc.name, out)
		assert.Equal(t, max(1, len(tc.upstream)), strings.Count(out, "HTTP/1.1 "), "%s: one answer per request forwarded, or one refusal", tc.name)
		for _, want := range tc.upstream {
			assert.Equal(t, want, <-got, tc.name)
		}
		assert.Empty(t, got, "%s: nothing else reached the provider", tc.name)
	}
}

// A request with a field name that is not a token (fasthttp takes one with
// a space inside) is refused, not forwarded: an upstream that ends the name
// at the space would frame the request by it.
func TestFieldNamesThatAreNotTokensAreRefused(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	upAddr, lines := rawUpstream(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, "http://"+upAddr)}))
	addr := strings.TrimPrefix(base, "http://")
	for _, raw := range []string{
		"POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding x: chunked\r\nContent-Length: 5\r\nConnection: close\r\n\r\n0\r\n\r\n",
		"POST /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length x: 5\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
	} {
		out := rawExchange(t, addr, raw)
		assert.True(t, strings.HasPrefix(out, "HTTP/1.1 400 "), "%q", out)
		assert.Contains(t, out, "is not a token", raw)
	}
	assert.Empty(t, lines, "nothing reached the provider")
}

// X-Governor-Max-Retries and X-Governor-Tenant hold one value each: sent
// twice with different values, the call is refused with 400 naming the
// header and nothing is sent upstream; sent twice with the same value, it
// runs as if sent once.
func TestRepeatedGovernorHeaders(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxRetries: 2}))
	c := client(t)
	send := func(id string, header string, values ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("POST", base+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		req.Header.Set("X-Mock-Fault", "500,500,500,500")
		req.Header[header] = values
		resp, err := c.Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		return resp, string(b)
	}
	for i, tc := range []struct{ header, first, second string }{
		{HeaderMaxRetries, "0", "100"},
		{HeaderMaxRetries, "1", ""},
		{HeaderTenant, "team-a", "team-b"},
	} {
		id := fmt.Sprintf("repeated-%d", i)
		resp, body := send(id, tc.header, tc.first, tc.second)
		assert.Equal(t, 400, resp.StatusCode, "%+v: %s", tc, body)
		assert.Contains(t, body, `"code":"bad_request"`, "%+v", tc)
		assert.Contains(t, body, tc.header+": sent 2 times with different values", "%+v", tc)
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), "%+v", tc)
		assert.Zero(t, mock.Stats().ByRequestID[id], "%+v: nothing is sent upstream", tc)
	}
	// The same value twice is that value.
	resp, body := send("repeated-same", HeaderMaxRetries, "1", "1")
	assert.Equal(t, 500, resp.StatusCode, body)
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
	assert.EqualValues(t, 2, mock.Stats().ByRequestID["repeated-same"])
}
