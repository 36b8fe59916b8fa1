package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// The tests of this file check the names users see, as a user meets them:
// the built binary, its -h, its listeners, spelt here literally (never
// through the packages' constants or types), so that a renamed header,
// field, status word, variable or default fails here.

// contractCall is one request to a running Governor and its whole answer.
type contractCall struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the answer's body as a JSON object.
func (c contractCall) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(c.body, &m), "not a JSON object: %s", c.body)
	return m
}

// send sends one request and returns its whole answer; headers are name,
// value pairs.
func send(t *testing.T, method, url, body string, headers ...string) contractCall {
	t.Helper()
	c, err := request(context.Background(), method, url, body, headers...)
	require.NoError(t, err, "%s %s", method, url)
	return c
}

// request is send for any goroutine, under ctx.
func request(ctx context.Context, method, url, body string, headers ...string) (contractCall, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return contractCall{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := oneShot.Do(req)
	if err != nil {
		return contractCall{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return contractCall{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// assertOpenAIError checks Governor's own error in the OpenAI shape:
// {"error":{"message":…,"type":"governor_error","code":code}}.
func assertOpenAIError(t *testing.T, c contractCall, status int, code string) {
	t.Helper()
	assert.Equal(t, status, c.status, "%s", c.body)
	var e struct {
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal(c.body, &e), "%s", c.body)
	assert.Equal(t, "governor_error", e.Error["type"], "%s", c.body)
	assert.Equal(t, code, e.Error["code"], "%s", c.body)
	assert.NotEmpty(t, e.Error["message"], "%s", c.body)
}

// assertAnthropicError checks Governor's own error in Anthropic's shape:
// {"type":"error","error":{"type":"governor_error","message":…}}.
func assertAnthropicError(t *testing.T, c contractCall, status int) {
	t.Helper()
	assert.Equal(t, status, c.status, "%s", c.body)
	var e struct {
		Type  string         `json:"type"`
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal(c.body, &e), "%s", c.body)
	assert.Equal(t, "error", e.Type, "%s", c.body)
	assert.Equal(t, "governor_error", e.Error["type"], "%s", c.body)
	assert.NotEmpty(t, e.Error["message"], "%s", c.body)
}

// assertRetryAfter checks a Retry-After Governor sends: whole seconds,
// from 1 to 60, the longest every official SDK honours.
func assertRetryAfter(t *testing.T, c contractCall) {
	t.Helper()
	s, err := strconv.Atoi(c.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", c.header.Get("Retry-After"))
	assert.True(t, s >= 1 && s <= 60, "Retry-After %d", s)
}

// lanesByName returns /governor/lanes' lanes, decoded loosely, by
// "upstream/model".
func (g *governorProcess) lanesByName(t *testing.T) map[string]map[string]any {
	t.Helper()
	c := send(t, "GET", "http://"+g.base+"/governor/lanes", "")
	require.Equal(t, 200, c.status, "%s", c.body)
	out := map[string]map[string]any{}
	for _, l := range c.json(t)["lanes"].([]any) {
		lane := l.(map[string]any)
		out[lane["upstream"].(string)+"/"+lane["model"].(string)] = lane
	}
	return out
}

// `governor -h` lists the variables of DESIGN.md with their defaults, and
// `governor batch -h` the subcommand's flags and exit codes.
func TestContractHelp(t *testing.T) {
	bin, err := buildGovernor()
	require.NoError(t, err)
	out, err := exec.Command(bin, "-h").Output()
	require.NoError(t, err, "governor -h exits 0")
	defaults := map[string]string{}
	row := regexp.MustCompile(`^\s+(GOVERNOR_[A-Z_]+)\s+(\S+)\s`)
	for line := range strings.Lines(string(out)) {
		if m := row.FindStringSubmatch(line); m != nil {
			defaults[m[1]] = m[2]
		}
	}
	for name, want := range map[string]string{
		"GOVERNOR_LISTEN":                   "127.0.0.1:8080",
		"GOVERNOR_ADMIN_LISTEN":             ":9090",
		"GOVERNOR_UPSTREAM":                 "https://api.openai.com",
		"GOVERNOR_ROUTES":                   `""`,
		"GOVERNOR_MAX_CONCURRENCY":          "64",
		"GOVERNOR_MAX_RETRIES":              "10",
		"GOVERNOR_ATTEMPT_TIMEOUT":          "10m",
		"GOVERNOR_QUEUE_TIMEOUT":            "10m",
		"GOVERNOR_QUEUE_CAPACITY":           "10000",
		"GOVERNOR_DRAIN_TIMEOUT":            "30s",
		"GOVERNOR_MAX_CONNS_PER_UPSTREAM":   "1024",
		"GOVERNOR_MAX_CONNECTIONS":          "0",
		"GOVERNOR_MAX_BUFFERED_BYTES":       "268435456", // 256 MiB
		"GOVERNOR_BATCH_DIR":                `""`,
		"GOVERNOR_BATCH_MAX_RESPONSE_BYTES": "8388608", // 8 MiB
		"GOVERNOR_ACCESS_LOG":               "false",
		// Phoenix's constants that both presets share.
		"GOVERNOR_AIMD_WINDOW":             "5s",
		"GOVERNOR_AIMD_COLLAPSE_WINDOW":    "15s",
		"GOVERNOR_AIMD_COLLAPSE_THRESHOLD": "2",
		"GOVERNOR_AIMD_LATENCY_ALPHA":      "0.2",
	} {
		assert.Equal(t, want, defaults[name], "governor -h: default of %s", name)
	}
	for _, name := range []string{"GOVERNOR_AIMD_PRESET", "GOVERNOR_AIMD_INITIAL", "GOVERNOR_AIMD_INCREASE_STEP", "GOVERNOR_AIMD_DECREASE_RATIO"} {
		assert.Contains(t, defaults, name, "governor -h lists %s", name)
	}
	assert.Contains(t, string(out), "governor batch [-url URL] [-o FILE] [-job ID]")

	out, err = exec.Command(bin, "batch", "-h").Output()
	require.NoError(t, err, "governor batch -h exits 0")
	for _, s := range []string{"-url URL", "-o FILE", "-job ID", "0 every item completed", "1 some item failed or did not run", "2 usage error"} {
		assert.Contains(t, string(out), s, "governor batch -h")
	}
	err = exec.Command(bin, "batch").Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "governor batch without input")
	assert.Equal(t, 2, exit.ExitCode(), "governor batch without input: usage")
}

// A forwarded call carries its execution headers; Governor's own errors
// have the OpenAI shape, Anthropic's on Anthropic's routes; the batch API
// answers in its documented fields; the admin listener serves its three
// endpoints and governor_lane_tokens_total.
func TestContractNames(t *testing.T) {
	// Answers as long as their max_tokens: one too large for a batch.
	mock, mockURL := startMock(t, mockllm.Config{FillMaxTokens: true})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL,
		"GOVERNOR_ROUTES=anthropic="+mockURL+",dead=http://127.0.0.1:1",
		"GOVERNOR_MAX_RETRIES=1", "GOVERNOR_BACKOFF_BASE=1ms", "GOVERNOR_BACKOFF_MAX=2ms",
		"GOVERNOR_MAX_BODY_BYTES=100000", "GOVERNOR_MAX_BUFFERED_BYTES=50000",
		"GOVERNOR_BATCH_MAX_RESPONSE_BYTES=4096", "GOVERNOR_MAX_CONNS_PER_UPSTREAM=7",
		"GOVERNOR_ATTEMPT_TIMEOUT=2s", "GOVERNOR_ACCESS_LOG=true")
	base := "http://" + g.base
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	const message = `{"model":"c","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`

	t.Run("execution headers", func(t *testing.T) {
		c := send(t, "POST", base+"/v1/chat/completions", chat, "Priority", "u=1")
		require.Equal(t, 200, c.status, "%s", c.body)
		assert.Equal(t, "COMPLETED", c.header.Get("X-Governor-Status"))
		assert.Equal(t, "1", c.header.Get("X-Governor-Attempts"))
		_, err := strconv.Atoi(c.header.Get("X-Governor-Queue-Ms"))
		assert.NoError(t, err, "X-Governor-Queue-Ms %q", c.header.Get("X-Governor-Queue-Ms"))
		assert.Empty(t, c.header.Get("X-Should-Retry"))

		c = send(t, "POST", base+"/v1/chat/completions", chat, "X-Mock-Fault", "500,ok", "X-Request-Id", "contract-retried")
		require.Equal(t, 200, c.status, "%s", c.body)
		assert.Equal(t, "COMPLETED_WITH_RETRIES", c.header.Get("X-Governor-Status"))
		assert.Equal(t, "2", c.header.Get("X-Governor-Attempts"))
	})

	t.Run("giving up", func(t *testing.T) {
		// GOVERNOR_MAX_RETRIES=1: two attempts, then the provider's answer.
		c := send(t, "POST", base+"/v1/chat/completions", chat, "X-Mock-Fault", "500,500,500", "X-Request-Id", "contract-failed")
		assert.Equal(t, 500, c.status)
		assert.Equal(t, "FAILED", c.header.Get("X-Governor-Status"))
		assert.Equal(t, "2", c.header.Get("X-Governor-Attempts"))
		assert.Equal(t, "false", c.header.Get("X-Should-Retry"))
		assert.Contains(t, string(c.body), `"server_error"`, "the provider's own body")
		assert.Equal(t, int64(2), mock.Stats().ByRequestID["contract-failed"])

		// X-Governor-Max-Retries: this call's budget.
		c = send(t, "POST", base+"/v1/chat/completions", chat, "X-Mock-Fault", "500,500", "X-Request-Id", "contract-once",
			"X-Governor-Max-Retries", "0")
		assert.Equal(t, "1", c.header.Get("X-Governor-Attempts"))
		assert.Equal(t, "false", c.header.Get("X-Should-Retry"))
		assert.Equal(t, int64(1), mock.Stats().ByRequestID["contract-once"])

		// The provider's retry hint comes back at most 60 s (a lane of
		// its own: the others are not paused).
		c = send(t, "POST", base+"/v1/chat/completions", `{"model":"paused"}`, "X-Mock-Fault", "429",
			"X-Mock-Retry-After", "3600", "X-Governor-Max-Retries", "0")
		assert.Equal(t, 429, c.status)
		assert.Equal(t, "false", c.header.Get("X-Should-Retry"))
		assertRetryAfter(t, c)
	})

	t.Run("Governor's errors", func(t *testing.T) {
		c := send(t, "POST", base+"/v1/chat/completions", chat, "X-Governor-Max-Retries", "many")
		assertOpenAIError(t, c, 400, "bad_request")
		c = send(t, "POST", base+"/anthropic/v1/messages", message, "X-Governor-Max-Retries", "many")
		assertAnthropicError(t, c, 400)
		c = send(t, "POST", base+"/v1/chat/completions", chat, "X-Governor-Tenant", "not a name")
		assertOpenAIError(t, c, 400, "bad_request")

		c = send(t, "POST", base+"/dead/v1/chat/completions", chat)
		assertOpenAIError(t, c, 502, "upstream_unreachable")
		assert.Equal(t, "false", c.header.Get("X-Should-Retry"))

		// GOVERNOR_ATTEMPT_TIMEOUT=2s.
		c = send(t, "POST", base+"/v1/chat/completions", chat, "X-Mock-Latency", "30s", "X-Governor-Max-Retries", "0")
		assertOpenAIError(t, c, 504, "upstream_timeout")
		assert.Equal(t, "false", c.header.Get("X-Should-Retry"))

		// GOVERNOR_MAX_BODY_BYTES, then GOVERNOR_MAX_BUFFERED_BYTES.
		tooLarge := `{"model":"m","pad":"` + strings.Repeat("x", 100_001) + `"}`
		c = send(t, "POST", base+"/v1/chat/completions", tooLarge)
		assertOpenAIError(t, c, 413, "request_too_large")
		c = send(t, "POST", base+"/anthropic/v1/messages", tooLarge)
		assertAnthropicError(t, c, 413)
		unbuffered := `{"model":"m","pad":"` + strings.Repeat("x", 60_000) + `"}`
		c = send(t, "POST", base+"/v1/chat/completions", unbuffered)
		assertOpenAIError(t, c, 503, "buffers_full")
		assertRetryAfter(t, c)
		c = send(t, "POST", base+"/anthropic/v1/messages", unbuffered)
		assertAnthropicError(t, c, 503)
		assertRetryAfter(t, c)
	})

	t.Run("sync batch, JSON", func(t *testing.T) {
		c := send(t, "POST", base+"/governor/batch", `{"max_retries":1,"requests":[
			{"url":"/v1/chat/completions","body":`+chat+`},
			{"url":"/v1/chat/completions","headers":{"X-Mock-Fault":"500,ok","X-Request-Id":"contract-item"},"body":`+chat+`},
			{"url":"/v1/chat/completions","headers":{"X-Mock-Fault":"400"},"body":`+chat+`},
			{"url":"/v1/chat/completions","body":{"model":"m","max_tokens":2000,"messages":[]}}]}`,
			"Content-Type", "application/json")
		require.Equal(t, 200, c.status, "%s", c.body)
		doc := c.json(t)
		outputs, details := doc["outputs"].([]any), doc["details"].([]any)
		require.Len(t, outputs, 4)
		require.Len(t, details, 4)
		var statuses []string
		for i, d := range details {
			row := d.(map[string]any)
			for _, field := range []string{"status", "attempts", "errors", "queue_seconds", "execution_seconds"} {
				assert.Contains(t, row, field, "details[%d]", i)
			}
			statuses = append(statuses, row["status"].(string))
		}
		assert.Equal(t, []string{"COMPLETED", "COMPLETED_WITH_RETRIES", "FAILED", "FAILED"}, statuses)
		assert.EqualValues(t, 2, details[1].(map[string]any)["attempts"])
		assert.Len(t, details[1].(map[string]any)["errors"], 1, "one error per failed attempt")
		assert.Contains(t, fmt.Sprint(details[3].(map[string]any)["errors"]), "answer too large",
			"GOVERNOR_BATCH_MAX_RESPONSE_BYTES fails the item clearly")
		assert.EqualValues(t, 200, outputs[0].(map[string]any)["status_code"])
		summary := doc["summary"].(map[string]any)
		assert.EqualValues(t, 4, summary["total"])
		for word, n := range map[string]int{"COMPLETED": 1, "COMPLETED_WITH_RETRIES": 1, "FAILED": 2, "DID_NOT_RUN": 0} {
			assert.EqualValues(t, n, summary[word], "summary %s", word)
		}
	})

	jsonl := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":` + chat + `}` + "\n" +
		`{"custom_id":"b","method":"POST","url":"/anthropic/v1/messages","body":` + message + `}` + "\n" +
		`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":` + chat + `}` + "\n"

	t.Run("sync batch, OpenAI Batch JSONL", func(t *testing.T) {
		c := send(t, "POST", base+"/governor/batch", jsonl, "Content-Type", "application/jsonl")
		require.Equal(t, 200, c.status, "%s", c.body)
		assert.Equal(t, "application/jsonl", c.header.Get("Content-Type"))
		var ids []string
		for line := range strings.Lines(string(c.body)) {
			var l struct {
				CustomID string `json:"custom_id"`
				Response struct {
					StatusCode int `json:"status_code"`
				} `json:"response"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &l), line)
			assert.Equal(t, 200, l.Response.StatusCode, line)
			ids = append(ids, l.CustomID)
		}
		assert.Equal(t, []string{"a", "b", "c"}, ids, "input order")
	})

	t.Run("sync batch, progress lines", func(t *testing.T) {
		c := send(t, "POST", base+"/governor/batch", jsonl, "Content-Type", "application/jsonl", "Accept", "application/x-ndjson")
		require.Equal(t, 200, c.status, "%s", c.body)
		assert.Equal(t, "application/x-ndjson", c.header.Get("Content-Type"))
		seen := map[float64]bool{}
		var last map[string]any
		for line := range strings.Lines(string(c.body)) {
			require.NoError(t, json.Unmarshal([]byte(line), &last), line)
			if _, ok := last["summary"]; ok {
				break
			}
			seen[last["index"].(float64)] = true
			assert.Equal(t, "COMPLETED", last["detail"].(map[string]any)["status"], line)
		}
		assert.Len(t, seen, 3, "one line per item")
		assert.EqualValues(t, 3, last["summary"].(map[string]any)["COMPLETED"], "then the summary")
	})

	t.Run("async jobs", func(t *testing.T) {
		c := send(t, "POST", base+"/governor/batches", jsonl, "Content-Type", "application/jsonl")
		require.Equal(t, 202, c.status, "%s", c.body)
		id := c.json(t)["id"].(string)
		require.NotEmpty(t, id)
		require.Eventually(t, func() bool {
			return send(t, "GET", base+"/governor/batches/"+id, "").json(t)["status"] == "completed"
		}, 10*time.Second, 10*time.Millisecond)
		c = send(t, "GET", base+"/governor/batches/"+id+"/results", "")
		require.Equal(t, 200, c.status, "%s", c.body)
		assert.Equal(t, 3, strings.Count(string(c.body), "\n"), "one JSONL line per item: %s", c.body)

		// A job of its own tenant, cancelled: what has not finished is
		// DID_NOT_RUN.
		c = send(t, "POST", base+"/governor/batches", `{"tenant":"team-b","concurrency":1,"requests":[
			{"url":"/v1/chat/completions","headers":{"X-Mock-Fault":"hang"},"body":`+chat+`},
			{"url":"/v1/chat/completions","body":`+chat+`}]}`)
		require.Equal(t, 202, c.status, "%s", c.body)
		id = c.json(t)["id"].(string)
		progress := send(t, "GET", base+"/governor/batches/"+id, "").json(t)
		assert.EqualValues(t, 2, progress["total"])
		assert.Contains(t, progress, "counts")
		require.Eventually(t, func() bool {
			for _, tn := range g.lanesByName(t)["default/m"]["tenants"].([]any) {
				if tn.(map[string]any)["tenant"] == "team-b" && tn.(map[string]any)["in_flight"] == 1.0 {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "the job's item in flight under its tenant")
		c = send(t, "DELETE", base+"/governor/batches/"+id, "")
		assert.Equal(t, 202, c.status, "%s", c.body)
		require.Eventually(t, func() bool {
			return send(t, "GET", base+"/governor/batches/"+id, "").json(t)["status"] == "cancelled"
		}, 10*time.Second, 10*time.Millisecond)
		doc := send(t, "GET", base+"/governor/batches/"+id+"/results", "").json(t)
		for i, d := range doc["details"].([]any) {
			assert.Equal(t, "DID_NOT_RUN", d.(map[string]any)["status"], "details[%d]", i)
		}
	})

	t.Run("lanes, page, admin", func(t *testing.T) {
		lane := g.lanesByName(t)["default/m"]
		require.NotNil(t, lane)
		for _, field := range []string{"target", "in_flight", "queued", "latency_ewma_ms"} {
			assert.IsType(t, 0.0, lane[field], "lane field %s", field)
		}
		assert.EqualValues(t, 7, lane["upstream_max_conns"], "GOVERNOR_MAX_CONNS_PER_UPSTREAM")

		c := send(t, "GET", base+"/governor/ui", "")
		assert.Equal(t, 200, c.status)
		assert.Contains(t, c.header.Get("Content-Type"), "text/html")

		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			assert.Equal(t, 200, send(t, "GET", "http://"+g.admin+path, "").status, path)
		}
		metrics := g.scrape(t)
		for _, kind := range []string{"prompt", "completion"} {
			m := regexp.MustCompile(`(?m)^governor_lane_tokens_total\{lane="default/m/[0-9a-f]+",kind="` + kind + `"\} (\S+)$`).FindStringSubmatch(metrics)
			if assert.NotNil(t, m, "governor_lane_tokens_total kind %s", kind) {
				v, _ := strconv.ParseFloat(m[1], 64)
				assert.Positive(t, v, kind)
			}
		}
	})

	t.Run("access log", func(t *testing.T) {
		require.Eventually(t, func() bool {
			return len(g.logLines(t, "call")) > 0 && len(g.logLines(t, "batch item")) > 0
		}, 5*time.Second, 5*time.Millisecond, "GOVERNOR_ACCESS_LOG=true: a line per call and per batch item")
	})
}

// Priority orders a lane's queue, where batch items wait at u=5 by
// default; a full queue answers 503 queue_full with
// Retry-After, a call waiting longer than GOVERNOR_QUEUE_TIMEOUT 504
// queue_timeout; X-Governor-Tenant names the share a call takes; the
// phoenix preset has Phoenix's constants.
func TestContractQueue(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_AIMD_PRESET=phoenix",
		"GOVERNOR_MAX_CONCURRENCY=1", "GOVERNOR_QUEUE_CAPACITY=3", "GOVERNOR_QUEUE_TIMEOUT=5s")
	base := "http://" + g.base

	cfg := g.logLines(t, "governor started")[0]["config"].(map[string]any)
	for name, want := range map[string]any{"GOVERNOR_AIMD_INCREASE_STEP": 0.5, "GOVERNOR_AIMD_DECREASE_RATIO": 0.5,
		"GOVERNOR_AIMD_WINDOW": "5s", "GOVERNOR_AIMD_COLLAPSE_WINDOW": "15s", "GOVERNOR_AIMD_COLLAPSE_THRESHOLD": 2.0,
		"GOVERNOR_AIMD_LATENCY_ALPHA": 0.2} {
		assert.Equal(t, want, cfg[name], "phoenix preset: %s", name)
	}

	// hold sends a call whose answer never comes, until cancel.
	hold := func(headers ...string) (cancel func(), done <-chan contractCall) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan contractCall, 1)
		go func() {
			c, err := request(ctx, "POST", base+"/v1/chat/completions", `{"model":"m"}`, append(headers, "X-Mock-Fault", "hang")...)
			if err != nil && ctx.Err() == nil {
				t.Errorf("held call %v: %v", headers, err)
			}
			ch <- c
		}()
		t.Cleanup(cancel)
		return cancel, ch
	}
	lane := func() map[string]any { return g.lanesByName(t)["default/m"] }
	waitLane := func(field string, want float64) {
		t.Helper()
		require.Eventually(t, func() bool { l := lane(); return l != nil && l[field] == want },
			10*time.Second, 5*time.Millisecond, "lane %s = %v", field, want)
	}

	// Every call below waits at most GOVERNOR_QUEUE_TIMEOUT (5 s) from
	// here, the background call first.
	first, _ := hold()
	waitLane("in_flight", 1)
	_, background := hold("Priority", "u=7", "X-Governor-Tenant", "team-a")
	waitLane("queued", 1)
	urgent, _ := hold("Priority", "u=0")
	waitLane("queued", 2)
	// A batch item waits at urgency 5 unless its batch says otherwise.
	c := send(t, "POST", base+"/governor/batches",
		`{"requests":[{"url":"/v1/chat/completions","headers":{"X-Mock-Fault":"hang"},"body":{"model":"m"}}]}`)
	require.Equal(t, 202, c.status, "%s", c.body)
	job := c.json(t)["id"].(string)
	waitLane("queued", 3)
	l := lane()
	assert.Equal(t, map[string]any{"u=0": 1.0, "u=5": 1.0, "u=7": 1.0}, l["queued_by_urgency"])
	assert.Contains(t, fmt.Sprint(l["tenants"]), "tenant:team-a")

	// Full, and nothing waits that is less urgent than u=7 (a more urgent
	// call would take the u=7 call's place).
	c = send(t, "POST", base+"/v1/chat/completions", `{"model":"m"}`, "Priority", "u=7")
	assertOpenAIError(t, c, 503, "queue_full")
	assertRetryAfter(t, c)
	assert.Empty(t, c.header.Get("X-Should-Retry"), "an SDK may come back after Retry-After")

	// The first call's client leaves: the urgent call goes next, ahead of
	// the batch item and the background call.
	first()
	require.Eventually(t, func() bool {
		l := lane()
		u := l["queued_by_urgency"].(map[string]any)
		return l["in_flight"] == 1.0 && u["u=0"] == nil && u["u=5"] == 1.0
	}, 10*time.Second, 5*time.Millisecond, "u=0 overtakes u=5 and u=7")

	bg := <-background
	assertOpenAIError(t, bg, 504, "queue_timeout")
	assert.Equal(t, "false", bg.header.Get("X-Should-Retry"), "the call has waited its time")
	urgent()
	// The job's item may have timed out in the queue too by now (200: a
	// finished job forgotten), or still wait (202: cancelled).
	assert.Contains(t, []int{200, 202}, send(t, "DELETE", base+"/governor/batches/"+job, "").status)
}

// The pacer reads the providers' budget headers: OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} and Anthropic's
// anthropic-ratelimit-{requests,input-tokens,output-tokens}-*, whose reset is
// an RFC 3339 time; the tokens of an answer's usage are counted.
func TestContractProviderHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/messages" {
			reset := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
			for name, v := range map[string]string{"requests": "50", "input-tokens": "40000", "output-tokens": "8000"} {
				limit, _ := strconv.Atoi(v)
				h.Set("anthropic-ratelimit-"+name+"-limit", v)
				h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.Itoa(limit-limit/50))
				h.Set("anthropic-ratelimit-"+name+"-reset", reset)
			}
			_, _ = io.WriteString(w, `{"type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":13,"output_tokens":5}}`)
			return
		}
		h.Set("x-ratelimit-limit-requests", "600")
		h.Set("x-ratelimit-remaining-requests", "599")
		h.Set("x-ratelimit-reset-requests", "100ms")
		h.Set("x-ratelimit-limit-tokens", "100000")
		h.Set("x-ratelimit-remaining-tokens", "99000")
		h.Set("x-ratelimit-reset-tokens", "600ms")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)
	}))
	defer up.Close()
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+up.URL, "GOVERNOR_ROUTES=anthropic="+up.URL)
	base := "http://" + g.base
	require.Equal(t, 200, send(t, "POST", base+"/v1/chat/completions", `{"model":"gpt"}`).status)
	require.Equal(t, 200, send(t, "POST", base+"/anthropic/v1/messages", `{"model":"claude","max_tokens":8}`).status)

	lanes := g.lanesByName(t)
	budgets := func(model string) map[string]any {
		out := map[string]any{}
		for _, b := range lanes[model]["token_budgets"].([]any) {
			out[b.(map[string]any)["kind"].(string)] = b.(map[string]any)["per_minute"]
		}
		return out
	}
	assert.NotNil(t, lanes["default/gpt"]["request_budget"], "x-ratelimit-*-requests")
	assert.Equal(t, map[string]any{"tokens": 100000.0}, budgets("default/gpt"), "x-ratelimit-*-tokens")
	assert.NotNil(t, lanes["anthropic/claude"]["request_budget"], "anthropic-ratelimit-requests-*")
	assert.Equal(t, map[string]any{"input_tokens": 40000.0, "output_tokens": 8000.0}, budgets("anthropic/claude"),
		"anthropic-ratelimit-{input,output}-tokens-*")

	metrics := g.scrape(t)
	sc := bufio.NewScanner(bytes.NewReader([]byte(metrics)))
	got := map[string]string{}
	sample := regexp.MustCompile(`^governor_lane_tokens_total\{lane="([a-z]+)/([a-z]+)/[0-9a-f]+",kind="([a-z]+)"\} (\S+)$`)
	for sc.Scan() {
		if m := sample.FindStringSubmatch(sc.Text()); m != nil {
			got[m[2]+" "+m[3]] = m[4]
		}
	}
	assert.Equal(t, map[string]string{"gpt prompt": "11", "gpt completion": "7", "claude prompt": "13", "claude completion": "5"}, got)
}
