package batch_test

import (
	"encoding/json"
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

// An item whose answer is larger than MaxResponseBytes fails, alone and
// clearly; the others complete.
func TestItemAnswerOverTheLimitFailsThatItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mock: mockllm.Config{FillMaxTokens: true}, batch: func(c *batch.Config) { c.MaxResponseBytes = 1500 }})
	small, large := chatItem("small", "a short question", nil), chatItem("large", "a long answer", nil)
	small["body"].(map[string]any)["max_tokens"] = 5
	large["body"].(map[string]any)["max_tokens"] = 4000
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{small, large}}))
	assert.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	d := doc.Details[1]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, 1, d.Attempts, "not retried: the same answer would come back")
	require.NotEmpty(t, d.Errors)
	assert.Contains(t, d.Errors[len(d.Errors)-1], "more than 1500 bytes")
	assert.JSONEq(t, "null", string(doc.Outputs[1]))
}

// An async job's items count against the proxy's budget for request
// bodies while the job runs: a job whose items would not fit gets 503
// buffers_full with Retry-After and runs nothing; once the running job
// stops, it is taken.
func TestAsyncJobItemsCountAgainstBufferedBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.MaxBufferedBytes = 3000 }})
	content := strings.Repeat("x", 500)
	job := func(id string, latency string) string {
		return mustJSON(t, map[string]any{"requests": []any{
			chatItem(id+"-1", content, map[string]string{"X-Mock-Latency": latency}),
			chatItem(id+"-2", content, map[string]string{"X-Mock-Latency": latency}),
		}})
	}
	running := e.createJob(t, job("a", "1m"))

	resp, out := e.post(t, batch.PathBatches, "application/json", job("b", "0s"))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, out)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, out, proxy.CodeBuffersFull)

	resp, out = e.do(t, http.MethodDelete, batch.PathBatches+"/"+running.ID, "", "")
	require.Less(t, resp.StatusCode, 300, out)
	e.waitJob(t, running.ID)
	var accepted batch.JobStatus
	require.Eventually(t, func() bool {
		resp, out := e.post(t, batch.PathBatches, "application/json", job("b", "0s"))
		if resp.StatusCode != http.StatusAccepted {
			return false
		}
		require.NoError(t, json.Unmarshal([]byte(out), &accepted))
		return true
	}, 10*time.Second, 10*time.Millisecond, "the budget comes back when the running job stops")
	st := e.waitJob(t, accepted.ID)
	assert.Equal(t, 2, st.Counts[string(proxy.StatusCompleted)], "%+v", st)
}
