package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// exchange is one request to Governor and everything that came back.
func exchange(t *testing.T, method, url string, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := oneShot.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var head bytes.Buffer
	require.NoError(t, resp.Header.Write(&head))
	return resp.StatusCode, head.String() + "\n" + string(b)
}

// A canary key sent on batch items and on calls that fail in every way
// Governor can report never shows in batch results (JSON, JSONL, NDJSON,
// async jobs), in Governor's error answers, in the lanes, the metrics or
// the debug logs.
func TestCanaryKeyNeverLeaksFromBatchesOrErrors(t *testing.T) {
	const canary = "sk-canary-batch-8d1e3f"
	_, mockURL := startMock(t, mockllm.Config{})
	// Nothing listens on port 1 (tcpmux), and no test can take it, as
	// another test's listener can take a port just freed.
	down := "127.0.0.1:1"
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_ROUTES=anthropic="+mockURL+",down=http://"+down,
		"GOVERNOR_LOG_LEVEL=debug", "GOVERNOR_ACCESS_LOG=true", "GOVERNOR_MAX_RETRIES=1", "GOVERNOR_BACKOFF_BASE=1ms", "GOVERNOR_BACKOFF_MAX=2ms",
		"GOVERNOR_MAX_BODY_BYTES=8192", // a body just over it; far larger ones get their 413 too (RELIABILITY.md, bug 5)
		// The last job's results are never read: the drain serves them
		// until this timeout, then logs them lost (a log searched too).
		"GOVERNOR_DRAIN_TIMEOUT=2s")
	base := "http://" + g.base
	bearer := map[string]string{"Authorization": "Bearer " + canary, "Content-Type": "application/json"}
	var outputs []string
	record := func(what string, wantStatus int) func(int, string) {
		return func(status int, out string) {
			assert.Equal(t, wantStatus, status, "%s: %s", what, out)
			outputs = append(outputs, what+"\n"+out)
		}
	}

	items := `[
		{"custom_id":"ok","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}]}},
		{"custom_id":"500","url":"/v1/chat/completions","headers":{"X-Mock-Fault":"500,500"},"body":{"model":"m","messages":[]}},
		{"custom_id":"reset","url":"/v1/chat/completions","headers":{"X-Mock-Fault":"reset,reset"},"body":{"model":"m","messages":[]}},
		{"custom_id":"401","url":"/v1/chat/completions","headers":{"X-Mock-Fault":"401"},"body":{"model":"m","messages":[]}},
		{"custom_id":"down","url":"/down/v1/chat/completions","body":{"model":"m","messages":[]}},
		{"custom_id":"azure","url":"/v1/chat/completions","headers":{"api-key":"` + canary + `","X-Mock-Fault":"500,500"},"body":{"model":"m","messages":[]}},
		{"custom_id":"anthropic","url":"/anthropic/v1/messages","headers":{"X-Api-Key":"` + canary + `","Anthropic-Version":"2023-06-01"},
		 "body":{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}}
	]`
	record("sync JSON batch", 200)(exchange(t, "POST", base+"/governor/batch", `{"requests":`+items+`}`, bearer))
	ndjson := map[string]string{"Accept": "application/x-ndjson"}
	for k, v := range bearer {
		ndjson[k] = v
	}
	record("NDJSON batch", 200)(exchange(t, "POST", base+"/governor/batch", `{"requests":`+items+`}`, ndjson))
	var lines []string
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(items), &list))
	for _, it := range list {
		it["method"] = "POST"
		b, _ := json.Marshal(it)
		lines = append(lines, string(b))
	}
	jsonl := map[string]string{"Authorization": "Bearer " + canary, "Content-Type": "application/jsonl"}
	record("JSONL batch", 200)(exchange(t, "POST", base+"/governor/batch", strings.Join(lines, "\n"), jsonl))

	// An async job: its status, results and the job list.
	status, out := exchange(t, "POST", base+"/governor/batches", `{"requests":`+items+`}`, bearer)
	record("async job created", 202)(status, out)
	var job struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "\n\n")+2:]), &job), out)
	require.Eventually(t, func() bool {
		_, out := exchange(t, "GET", base+"/governor/batches/"+job.ID, "", nil)
		return strings.Contains(out, `"status":"completed"`)
	}, 30*time.Second, 20*time.Millisecond)
	record("async job status", 200)(exchange(t, "GET", base+"/governor/batches/"+job.ID, "", nil))
	record("async job results", 200)(exchange(t, "GET", base+"/governor/batches/"+job.ID+"/results", "", nil))
	record("async job list", 200)(exchange(t, "GET", base+"/governor/batches", "", nil))

	// Governor's own errors, each carrying the canary the way a client
	// would.
	chatBody := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	record("unreachable upstream", 502)(exchange(t, "POST", base+"/down/v1/chat/completions", chatBody, bearer))
	record("unreachable Anthropic upstream", 502)(exchange(t, "POST", base+"/down/v1/messages", chatBody,
		map[string]string{"X-Api-Key": canary, "Anthropic-Version": "2023-06-01"}))
	record("unreachable upstream, Azure api-key", 502)(exchange(t, "POST", base+"/down/v1/chat/completions", chatBody,
		map[string]string{"api-key": canary}))
	record("async job inheriting an Azure api-key", 202)(exchange(t, "POST", base+"/governor/batches", `{"requests":`+items+`}`,
		map[string]string{"api-key": canary, "Content-Type": "application/json"}))
	record("connection reset twice", 502)(exchange(t, "POST", base+"/v1/chat/completions", chatBody,
		map[string]string{"Authorization": "Bearer " + canary, "X-Mock-Fault": "reset,reset"}))
	record("body too large", 413)(exchange(t, "POST", base+"/v1/chat/completions", strings.Repeat("x", 9000), bearer))
	record("bad batch: header injection", 400)(exchange(t, "POST", base+"/governor/batch",
		`{"requests":[{"url":"/v1/x","body":{},"headers":{"Authorization":"Bearer `+canary+`\r\nX-Injected: 1"}}]}`, bearer))
	record("bad batch: absolute url", 400)(exchange(t, "POST", base+"/governor/batch",
		`{"requests":[{"url":"https://evil.example/?key=x","body":{},"headers":{"X-Api-Key":"`+canary+`"}}]}`, bearer))
	record("bad batch: bad header value type", 400)(exchange(t, "POST", base+"/governor/batch",
		`{"requests":[{"url":"/v1/x","body":{},"headers":{"X-Api-Key":["`+canary+`"]}}]}`, bearer))

	record("lanes", 200)(exchange(t, "GET", base+"/governor/lanes", "", nil))
	record("metrics", 200)(exchange(t, "GET", "http://"+g.admin+"/metrics", "", nil))
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
	outputs = append(outputs, "logs\n"+g.stderr.String())

	require.Contains(t, g.stderr.String(), `"msg":"call"`, "the access log has a line per call")
	// The outputs searched hold what a key could hide in: per-attempt
	// errors, Governor's error messages, provider answers.
	all := strings.Join(outputs, "\n")
	for _, want := range []string{"500 server_error", "connection error", "401 invalid_api_key", "upstream_unreachable",
		"request_too_large", "line break", `"credential":"`} {
		require.Contains(t, all, want)
	}
	for _, out := range outputs {
		what, _, _ := strings.Cut(out, "\n")
		assert.NotContains(t, out, canary, what)
		assert.NotContains(t, out, canary[3:], what)
	}
}

// With GOVERNOR_API_TOKEN set, every /governor/* endpoint answers 401 and
// runs nothing unless the request carries X-Governor-Token; forwarded calls
// need no token.
func TestAPITokenGuardsEveryGovernorEndpoint(t *testing.T) {
	const token = "tok-guard-51c9"
	mock, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_API_TOKEN="+token)
	base := "http://" + g.base
	batchBody := `{"requests":[{"url":"/v1/chat/completions","body":{"model":"m","messages":[]}}]}`
	jsonl := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`
	for _, wrong := range []map[string]string{nil, {"X-Governor-Token": "wrong"}, {"X-Governor-Token": token + "x"},
		{"X-Governor-Token": ""}, {"Authorization": "Bearer " + token}} {
		for _, r := range []struct{ method, path, body, contentType string }{
			{"POST", "/governor/batch", batchBody, "application/json"},
			{"POST", "/governor/batch", jsonl, "application/jsonl"},
			{"POST", "/governor/batches", batchBody, "application/json"},
			{"GET", "/governor/batches", "", ""},
			{"GET", "/governor/batches/x", "", ""},
			{"GET", "/governor/batches/x/results", "", ""},
			{"DELETE", "/governor/batches/x", "", ""},
			{"POST", "/governor/batches/x/cancel", "", ""},
			{"GET", "/governor/lanes", "", ""},
			{"GET", "/governor/nope", "", ""},
			{"GET", "/governor", "", ""},
		} {
			h := map[string]string{"Content-Type": r.contentType}
			for k, v := range wrong {
				h[k] = v
			}
			status, out := exchange(t, r.method, base+r.path, r.body, h)
			assert.Equal(t, 401, status, "%s %s with %v: %s", r.method, r.path, wrong, out)
			assert.Contains(t, out, `"code":"unauthorized"`)
			assert.NotContains(t, out, token, "the token is never echoed")
		}
	}
	assert.Zero(t, mock.Stats().Received, "no unauthorized call ran anything")

	status, out := exchange(t, "POST", base+"/governor/batch", batchBody,
		map[string]string{"Content-Type": "application/json", "X-Governor-Token": token})
	assert.Equal(t, 200, status, out)
	status, out = exchange(t, "POST", base+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
	assert.Equal(t, 200, status, "forwarded calls need no token: %s", out)
	assert.Equal(t, int64(2), mock.Stats().Received)
	assert.Empty(t, mock.Stats().LastHeaders["x-governor-token"])
}

// The main listener is on loopback unless configured otherwise, and
// Governor warns when it is not and no API token guards /governor/*.
func TestMainListenerIsLoopbackByDefault(t *testing.T) {
	cfg, err := loadConfig(nil)
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(cfg.Listen)
	require.NoError(t, err)
	assert.True(t, net.ParseIP(host).IsLoopback(), "GOVERNOR_LISTEN defaults to loopback, not %q", cfg.Listen)

	_, mockURL := startMock(t, mockllm.Config{})
	bin, err := buildGovernor()
	require.NoError(t, err)
	for _, tc := range []struct {
		token string
		warns bool
	}{{"", true}, {"tok-1", false}} {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_LISTEN=0.0.0.0:0",
			"GOVERNOR_ADMIN_LISTEN=127.0.0.1:0", "GOVERNOR_API_TOKEN="+tc.token)
		stderr := newLockedBuffer()
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `"msg":"governor started"`) },
			20*time.Second, 10*time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, cmd.Wait())
		logs := stderr.String()
		assert.Equal(t, tc.warns, strings.Contains(logs, "not on loopback and GOVERNOR_API_TOKEN is not set"),
			"token %q: %s", tc.token, logs)
		assert.NotContains(t, logs, "tok-1")
	}
}
