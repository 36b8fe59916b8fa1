package main

import (
	"encoding/json"
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

// A Governor killed with SIGKILL while a job's items are in flight, then
// started on the same batch directory: the items sent again report every
// attempt the provider received, those before the kill included, so that
// for each item its details' attempts equal the provider's count of its
// sends, and the sends before the kill are marked.
func TestKilledJobDetailsCountEverySend(t *testing.T) {
	mock, mockURL, stop, err := mockllm.Start(mockllm.Config{Latency: 300 * time.Millisecond})
	require.NoError(t, err)
	defer stop()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + t.TempDir(), "GOVERNOR_MAX_CONCURRENCY=8"}
	const n = 40
	var reqs []string
	for i := range n {
		reqs = append(reqs, fmt.Sprintf(`{"custom_id":"item-%d","url":"/v1/chat/completions","headers":{"X-Request-Id":"item-%d"},"body":{"model":"m","messages":[{"role":"user","content":"item %d"}]}}`, i, i, i))
	}
	body := `{"requests":[` + strings.Join(reqs, ",") + `],"max_retries":0}`

	g := startGovernor(t, env...)
	resp, err := oneShot.Post("http://"+g.base+"/governor/batches", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	var st struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool { s := mock.Stats(); return s.Received >= 12 && s.InFlight > 0 },
		20*time.Second, time.Millisecond)
	require.NoError(t, g.cmd.Process.Kill())
	<-g.exited

	g = startGovernor(t, env...)
	require.Eventually(t, func() bool { _, s := durableJobState(t, g, st.ID); return s == "completed" },
		30*time.Second, 10*time.Millisecond, "the job resumes by itself and completes")
	resp, err = oneShot.Get("http://" + g.base + "/governor/batches/" + st.ID + "/results")
	require.NoError(t, err)
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	var doc struct {
		Details []struct {
			Status                string
			Attempts              int
			AttemptsBeforeRestart int `json:"attempts_before_restart"`
			Errors                []string
		}
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Len(t, doc.Details, n)
	sends := mock.Stats().ByRequestID
	resent := 0
	for i, d := range doc.Details {
		id := fmt.Sprintf("item-%d", i)
		assert.Equal(t, int(sends[id]), d.Attempts, "%s: its attempts are the provider's count of its sends", id)
		assert.Equal(t, d.Attempts-1, d.AttemptsBeforeRestart, "%s: every send but the last was before the kill", id)
		assert.Len(t, d.Errors, d.AttemptsBeforeRestart, id)
		if d.AttemptsBeforeRestart > 0 {
			resent++
			assert.Equal(t, "COMPLETED_WITH_RETRIES", d.Status, id)
		} else {
			assert.Equal(t, "COMPLETED", d.Status, id)
		}
	}
	assert.Positive(t, resent, "some items were in flight at the kill")
	t.Logf("%d items sent again after the kill", resent)
}
