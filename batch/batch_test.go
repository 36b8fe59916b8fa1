package batch_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

func TestOutputsComeBackInInputOrderUnderALowCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mock: mockllm.Config{MaxConcurrency: 4, Latency: 10 * time.Millisecond}})
	const n = 200
	items := make([]any, n)
	for i := range items {
		items[i] = chatItem(fmt.Sprintf("item-%d", i), fmt.Sprintf("question %d", i), nil)
	}
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": items}))

	require.Len(t, doc.Outputs, n)
	require.Len(t, doc.Details, n)
	for i := range n {
		assert.Equal(t, fmt.Sprintf("Simulated answer to: question %d", i), answerText(t, doc.Outputs[i]), "output %d", i)
		d := doc.Details[i]
		assert.Contains(t, []proxy.Status{proxy.StatusCompleted, proxy.StatusCompletedWithRetries}, d.Status, "detail %d", i)
		assert.Len(t, d.Errors, d.Attempts-1, "detail %d: one error per failed attempt", i)
		if d.Status == proxy.StatusCompleted {
			assert.Equal(t, 1, d.Attempts, "detail %d", i)
		}
	}
	s := doc.Summary
	assert.Equal(t, n, s.Total)
	assert.Equal(t, n, s.Completed+s.CompletedWithRetries)
	assert.Zero(t, s.Failed+s.DidNotRun)
	assert.Positive(t, s.WallSeconds)
	st := e.mock.Stats()
	assert.LessOrEqual(t, st.MaxInFlight, 4)
	assert.Equal(t, int64(n), st.Answered[200], "every item answered once")
}

func TestItemAnswered400FailsAfterOneAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("bad", "x", map[string]string{"X-Mock-Fault": "400", "X-Request-Id": "bad"}),
		chatItem("good", "y", nil),
	}}))
	d := doc.Details[0]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, 1, d.Attempts)
	require.Len(t, d.Errors, 1)
	assert.True(t, strings.HasPrefix(d.Errors[0], "400 "), d.Errors[0])
	assert.Equal(t, 400, d.StatusCode)
	assert.JSONEq(t, "null", string(doc.Outputs[0]), "a failed item's output is the fallback")
	assert.Equal(t, proxy.StatusCompleted, doc.Details[1].Status)
	assert.Equal(t, int64(1), e.mock.Stats().ByRequestID["bad"], "never retried")
}

func TestItemAnswered429TwiceCompletesWithRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "x", map[string]string{"X-Mock-Fault": "429,429,ok", "X-Request-Id": "flaky"}),
	}}))
	d := doc.Details[0]
	assert.Equal(t, proxy.StatusCompletedWithRetries, d.Status)
	assert.Equal(t, 3, d.Attempts)
	require.Len(t, d.Errors, 2)
	for _, msg := range d.Errors {
		assert.True(t, strings.HasPrefix(msg, "429 "), msg)
	}
	assert.Equal(t, "Simulated answer to: x", answerText(t, doc.Outputs[0]))
	assert.Equal(t, int64(3), e.mock.Stats().ByRequestID["flaky"])
}

func TestExitOnErrorStopsTheBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	items := []any{
		chatItem("", "first", nil),
		chatItem("", "fails", map[string]string{"X-Mock-Fault": "400"}),
	}
	for i := range 30 {
		items = append(items, chatItem("", fmt.Sprintf("later %d", i), nil))
	}
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": items, "exit_on_error": true,
		"concurrency": 1, "fallback": map[string]any{"skipped": true}}))

	require.Len(t, doc.Details, len(items), "one row per item")
	assert.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	assert.Equal(t, proxy.StatusFailed, doc.Details[1].Status)
	for i := 2; i < len(items); i++ {
		assert.Equal(t, proxy.StatusDidNotRun, doc.Details[i].Status, "item %d", i)
		assert.Zero(t, doc.Details[i].Attempts, "item %d", i)
		assert.JSONEq(t, `{"skipped":true}`, string(doc.Outputs[i]), "item %d gets the fallback", i)
	}
	assert.Equal(t, len(items)-2, doc.Summary.DidNotRun)
	assert.Equal(t, "exit_on_error", doc.Summary.Stopped)
	assert.Equal(t, int64(2), e.mock.Stats().Received, "nothing is sent after the failure")
}

func TestItemsInheritTheBatchCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}}),
		"Authorization", "Bearer sk-batch", "OpenAI-Project", "proj_1")
	require.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	h := e.mock.Stats().LastHeaders
	assert.Equal(t, "Bearer sk-batch", h["authorization"])
	assert.Equal(t, "proj_1", h["openai-project"])

	// Azure OpenAI's api-key is inherited too.
	doc = e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}}),
		"api-key", "azure-key")
	require.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	assert.Equal(t, "azure-key", e.mock.Stats().LastHeaders["api-key"])

	// An item's own credential wins.
	doc = e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "x", map[string]string{"authorization": "Bearer sk-item"})}}),
		"Authorization", "Bearer sk-batch")
	require.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	assert.Equal(t, "Bearer sk-item", e.mock.Stats().LastHeaders["authorization"])
}

func TestPrefixRoutesApplyToItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{map[string]any{
		"url":  "/anthropic/v1/messages",
		"body": map[string]any{"model": "claude-test", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hi"}}},
	}}}), "x-api-key", "sk-ant", "anthropic-version", "2023-06-01")
	require.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	var out struct {
		Body struct{ Type string }
	}
	require.NoError(t, json.Unmarshal(doc.Outputs[0], &out))
	assert.Equal(t, "message", out.Body.Type)
	assert.Equal(t, "sk-ant", e.mock.Stats().LastHeaders["x-api-key"])
}

func TestJSONLRoundTripMatchesOpenAIBatchOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	lines := []string{
		`{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-test","messages":[{"role":"user","content":"one"}]}}`,
		`{"custom_id":"req-2","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-test","messages":[{"role":"user","content":"two"}]},"headers":{"X-Mock-Fault":"400"}}`,
		``,
		`{"custom_id":"req-3","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"three"}}`,
	}
	resp, out := e.post(t, batch.PathBatch+"?max_retries=0", "application/jsonl", strings.Join(lines, "\n")+"\n")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	assert.Equal(t, "application/jsonl", resp.Header.Get("Content-Type"))

	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, got, 3, "one line per request, blank lines skipped")
	for i, line := range got {
		var l map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		keys := make([]string, 0, len(l))
		for k := range l {
			keys = append(keys, k)
		}
		assert.ElementsMatch(t, []string{"id", "custom_id", "response", "error"}, keys, "OpenAI Batch output fields: %s", line)
		var typed struct {
			ID       string  `json:"id"`
			CustomID string  `json:"custom_id"`
			Error    *string `json:"error"`
			Response struct {
				StatusCode int             `json:"status_code"`
				RequestID  string          `json:"request_id"`
				Body       json.RawMessage `json:"body"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &typed))
		assert.True(t, strings.HasPrefix(typed.ID, "batch_req_"), typed.ID)
		assert.Equal(t, fmt.Sprintf("req-%d", i+1), typed.CustomID, "input order")
		assert.Nil(t, typed.Error, "a provider answer, even an error status, is a response")
		assert.True(t, json.Valid(typed.Response.Body) && typed.Response.Body[0] == '{', "body is the JSON answer")
		want := 200
		if i == 1 {
			want = 400
		}
		assert.Equal(t, want, typed.Response.StatusCode, line)
		if want == 200 {
			assert.NotEmpty(t, typed.Response.RequestID, "the provider's x-request-id")
		}
	}
}

func TestJSONLItemThatDidNotRunHasAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	body := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"},"headers":{"X-Mock-Fault":"400"}}
{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}
`
	resp, out := e.post(t, batch.PathBatch+"?exit_on_error=true&concurrency=1", "application/jsonl", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	var second struct {
		CustomID string          `json:"custom_id"`
		Response json.RawMessage `json:"response"`
		Error    struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &second))
	assert.Equal(t, "b", second.CustomID)
	assert.JSONEq(t, "null", string(second.Response))
	assert.Equal(t, "did_not_run", second.Error.Code)
	assert.NotEmpty(t, second.Error.Message)
}

func TestProgressLinesArriveWhileLaterItemsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	body := mustJSON(t, map[string]any{"requests": []any{
		chatItem("slow", "slow", map[string]string{"X-Mock-Latency": "3s"}),
		chatItem("fast", "fast", nil),
	}})
	req, err := http.NewRequest(http.MethodPost, e.base+batch.PathBatch, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := e.c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	r := bufio.NewReader(resp.Body)

	first, err := r.ReadString('\n')
	require.NoError(t, err)
	// The slow item has not been answered when the first line arrives.
	assert.Equal(t, int64(0), e.mock.Stats().Answered[200]-1, "only the fast item is answered so far")
	// The slow item may reach the provider after the fast one is back (the
	// two are dispatched together), but it runs for 3s.
	assert.Eventually(t, func() bool { return e.mock.Stats().InFlight == 1 }, 2*time.Second, time.Millisecond,
		"the slow item is still running")
	var line struct {
		Index    int
		CustomID string `json:"custom_id"`
		Output   json.RawMessage
		Detail   batch.Detail
	}
	require.NoError(t, json.Unmarshal([]byte(first), &line), first)
	assert.Equal(t, 1, line.Index)
	assert.Equal(t, "fast", line.CustomID)
	assert.Equal(t, proxy.StatusCompleted, line.Detail.Status)
	assert.Equal(t, "Simulated answer to: fast", answerText(t, line.Output))

	second, err := r.ReadString('\n')
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(second), &line), second)
	assert.Equal(t, 0, line.Index)
	assert.Equal(t, "slow", line.CustomID)

	last, err := r.ReadString('\n')
	require.NoError(t, err)
	var sum struct{ Summary batch.Summary }
	require.NoError(t, json.Unmarshal([]byte(last), &sum), last)
	assert.Equal(t, 2, sum.Summary.Total)
	assert.Equal(t, 2, sum.Summary.Completed)
	_, err = r.ReadString('\n')
	assert.ErrorIs(t, err, io.EOF, "the summary is the last line")
}

func TestInteractiveCallsOvertakeBatchItems(t *testing.T) {
	// One call at a time in the lane: what goes next is the queue's choice.
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.AIMD.Max = 1 }})
	// Every call carries the same request id, so the provider numbers
	// them in the order they reach it.
	const turns = "overtake-turns"
	const n = 4
	items := make([]any, n)
	for i := range items {
		items[i] = chatItem("", fmt.Sprintf("background %d", i), map[string]string{"X-Mock-Latency": "300ms", "X-Request-Id": turns})
	}
	batchDone := make(chan batch.Document, 1)
	go func() { batchDone <- e.runBatch(t, mustJSON(t, map[string]any{"requests": items})) }()
	require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 1 }, 10*time.Second, time.Millisecond,
		"the first batch item is in flight, the others wait")

	// An interactive call (default urgency 3) to the same lane. The
	// provider answers it only as the second call it receives: later, it
	// fails with 503, and Governor would retry it.
	resp, out := e.post(t, "/v1/chat/completions", "application/json", mustJSON(t, chatItem("", "interactive", nil)["body"]),
		"X-Request-Id", turns, mockllm.HeaderFault, "503,ok,503,503,503,503,503,503")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	assert.Equal(t, "1", resp.Header.Get(proxy.HeaderAttempts),
		"the interactive call went right after the item in flight, ahead of the batch's waiting items")

	doc := <-batchDone
	assert.Equal(t, n, doc.Summary.Completed)
	assert.Equal(t, int64(n+1), e.mock.Stats().ByRequestID[turns], "each call reached the provider once")
}

func TestTimeoutBoundsEachAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "slow", map[string]string{"X-Mock-Latency": "5s"}),
	}, "timeout": "100ms", "max_retries": 1, "fallback": "timed out"}))
	d := doc.Details[0]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, 2, d.Attempts)
	assert.Equal(t, []string{"timeout after 100ms", "timeout after 100ms"}, d.Errors)
	assert.Less(t, d.ExecutionSeconds, 5.0, "no attempt ran to the provider's answer")
	assert.JSONEq(t, `"timed out"`, string(doc.Outputs[0]))
}

// A FAILED item keeps the provider's error body in its detail, in the JSON
// answer, the progress stream and an async job's results (kept in memory
// or on disk), as the OpenAI Batch format keeps it in its response.
func TestFailedItemKeepsTheProviderError(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"", t.TempDir()} {
		e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.Dir = dir }})
		body := mustJSON(t, map[string]any{"requests": []any{
			chatItem("ok", "fine", nil),
			chatItem("bad", "refused", map[string]string{"X-Mock-Fault": "400"}),
		}, "fallback": "none"})
		check := func(where string, d batch.Detail, out json.RawMessage) {
			assert.Equal(t, proxy.StatusFailed, d.Status, where)
			require.NotNil(t, d.Response, where)
			assert.Equal(t, 400, d.Response.StatusCode, where)
			assert.Contains(t, string(d.Response.Body), `"error"`, where)
			assert.JSONEq(t, `"none"`, string(out), "%s: the output is the fallback", where)
		}

		doc := e.runBatch(t, body)
		check("sync", doc.Details[1], doc.Outputs[1])
		assert.Nil(t, doc.Details[0].Response, "a completed item's answer is its output")

		_, out := e.post(t, batch.PathBatch, "application/json", body, "Accept", "application/x-ndjson")
		seen := false
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			var l struct {
				Index  int
				Output json.RawMessage
				Detail batch.Detail
			}
			require.NoError(t, json.Unmarshal([]byte(line), &l), line)
			if l.Index == 1 && l.Detail.Status != "" {
				check("progress", l.Detail, l.Output)
				seen = true
			}
		}
		assert.True(t, seen, "a progress line for the failed item: %s", out)

		st := e.createJob(t, body)
		e.waitJob(t, st.ID)
		_, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
		doc = batch.Document{}
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
		check("async, dir "+dir, doc.Details[1], doc.Outputs[1])
	}
}
