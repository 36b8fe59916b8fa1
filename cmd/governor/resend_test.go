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
//
// The kill comes once the lane's every slot holds a call at a provider
// that never answers: no attempt is then between its note and its send
// (noted with its slot held, it would have to be one of those), so the
// sends before the kill are exactly those noted. The Governor started
// again sends to a provider that answers.
func TestKilledJobDetailsCountEverySend(t *testing.T) {
	hung, hungURL := startMock(t, mockllm.Config{Latency: time.Hour})
	mock, mockURL := startMock(t, mockllm.Config{Latency: 5 * time.Millisecond})
	const slots = 8
	env := []string{"GOVERNOR_BATCH_DIR=" + t.TempDir(), fmt.Sprintf("GOVERNOR_MAX_CONCURRENCY=%d", slots),
		fmt.Sprintf("GOVERNOR_AIMD_INITIAL=%d", slots), "GOVERNOR_AIMD_ADMISSION_WINDOW=-1ns"}
	const n = 40
	var reqs []string
	for i := range n {
		reqs = append(reqs, fmt.Sprintf(`{"custom_id":"item-%d","url":"/v1/chat/completions","headers":{"X-Request-Id":"item-%d"},"body":{"model":"m","messages":[{"role":"user","content":"item %d"}]}}`, i, i, i))
	}
	body := `{"requests":[` + strings.Join(reqs, ",") + `],"max_retries":0}`

	g := startGovernor(t, append(env, "GOVERNOR_UPSTREAM="+hungURL)...)
	resp, err := oneShot.Post("http://"+g.base+"/governor/batches", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	var st struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool { return hung.Stats().InFlight == slots }, 20*time.Second, time.Millisecond)
	require.NoError(t, g.cmd.Process.Kill())
	<-g.exited

	g = startGovernor(t, append(env, "GOVERNOR_UPSTREAM="+mockURL)...)
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
	before, after := hung.Stats().ByRequestID, mock.Stats().ByRequestID
	resent := 0
	for i, d := range doc.Details {
		id := fmt.Sprintf("item-%d", i)
		assert.Equal(t, int(before[id]+after[id]), d.Attempts, "%s: its attempts are the provider's count of its sends", id)
		assert.Equal(t, d.Attempts-1, d.AttemptsBeforeRestart, "%s: every send but the last was before the kill", id)
		assert.Len(t, d.Errors, d.AttemptsBeforeRestart, id)
		if d.AttemptsBeforeRestart > 0 {
			resent++
			assert.Equal(t, "COMPLETED_WITH_RETRIES", d.Status, id)
		} else {
			assert.Equal(t, "COMPLETED", d.Status, id)
		}
	}
	assert.Equal(t, slots, resent, "the items in flight at the kill are sent again")
}
