package batch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
)

// While an async job runs, the metrics say how far along it is: its items
// are counted by status as each one ends, and governor_batch_items_pending
// counts those still to come; a cancel turns them into DID_NOT_RUN.
func TestBatchProgressShowsInMetricsWhileItRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const n = 6
	items := make([]any, n)
	for i := range items {
		var h map[string]string
		if i == n-1 {
			h = map[string]string{"X-Mock-Fault": "hang"} // the job stays running
		}
		items[i] = chatItem("", fmt.Sprintf("q%d", i), h)
	}
	resp, out := e.post(t, batch.PathBatches, "application/json", mustJSON(t, map[string]any{"requests": items, "timeout": "1h"}))
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	var st batch.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	id := st.ID

	completed := `governor_batch_items_total{status="COMPLETED"}`
	require.Eventually(t, func() bool { return e.counter(t, completed) == n-1 }, 10*time.Second, 5*time.Millisecond,
		"the items that ended are counted before the job ends")
	assert.Equal(t, 1, e.counter(t, "governor_batch_items_pending"), "one item is still to come")
	assert.Equal(t, 1, e.counter(t, `governor_batch_jobs{state="running"}`))

	resp, out = e.do(t, http.MethodDelete, batch.PathBatches+"/"+id, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	require.Eventually(t, func() bool { return e.counter(t, `governor_batch_jobs{state="running"}`) == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, e.counter(t, "governor_batch_items_pending"))
	assert.Equal(t, n-1, e.counter(t, completed), "each item counted once")
	assert.Equal(t, 1, e.counter(t, `governor_batch_items_total{status="DID_NOT_RUN"}`), "the item cut by the cancel")
}
