package batch_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/proxy"
)

// listed is GET /governor/batches?sync=true.
func (e *env) listed(t *testing.T) (jobs, sync []batch.JobStatus) {
	t.Helper()
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"?sync=true", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var l struct{ Batches, Sync []batch.JobStatus }
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.NotNil(t, l.Sync, "sync is a list, empty or not: %s", out)
	return l.Batches, l.Sync
}

// A sync batch, or a progress stream, can be watched while it runs, and
// leaves the list when its client has its answer or has gone.
func TestSyncBatchListedWhileItRuns(t *testing.T) {
	for _, accept := range []string{"application/json", "application/x-ndjson"} {
		t.Run(accept, func(t *testing.T) { testSyncBatchListed(t, accept) })
	}
}

func testSyncBatchListed(t *testing.T, accept string) {
	e := newEnv(t, envOptions{})
	_, sync := e.listed(t)
	assert.Empty(t, sync, "nothing runs yet")

	body := mustJSON(t, map[string]any{"requests": []any{
		chatItem("fast", "fast", nil),
		chatItem("slow", "slow", map[string]string{"X-Mock-Latency": "1m"}),
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+batch.PathBatch, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	gone := make(chan error, 1)
	go func() {
		resp, err := e.c.Do(req)
		if err == nil {
			// A progress stream answers at once; its client reads on.
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		gone <- err
	}()

	var st batch.JobStatus
	require.Eventually(t, func() bool {
		_, sync := e.listed(t)
		if len(sync) == 1 && sync[0].Counts[string(proxy.StatusCompleted)] == 1 {
			st = sync[0]
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the sync batch shows with its fast item done")
	assert.Equal(t, batch.JobRunning, st.Status)
	assert.Equal(t, 2, st.Total)
	assert.Equal(t, 1, st.Counts["PENDING"])
	assert.True(t, strings.HasPrefix(st.ID, "batch_"), st.ID)
	assert.NotNil(t, st.StartedAt)
	jobs, _ := e.listed(t)
	assert.Empty(t, jobs, "a sync batch is not a job")
	// It is progress to watch, not a job to fetch or cancel.
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, out)

	// Without ?sync=true the list is the jobs' alone.
	_, out = e.do(t, http.MethodGet, batch.PathBatches, "", "")
	assert.JSONEq(t, `{"batches":[]}`, out)
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"?sync=maybe", "", "")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, out)
	assert.Contains(t, out, `sync: want true or false, got \"maybe\"`)

	cancel()
	require.Error(t, <-gone)
	require.Eventually(t, func() bool {
		_, sync := e.listed(t)
		return len(sync) == 0
	}, 10*time.Second, 5*time.Millisecond, "the batch whose client left is gone from the list")
}

// A sync batch leaves the list before its client has the answer.
func TestSyncBatchUnlistedWhenDone(t *testing.T) {
	e := newEnv(t, envOptions{})
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{chatItem("a", "a", nil)}}))
	require.Equal(t, 1, doc.Summary.Completed)
	_, sync := e.listed(t)
	assert.Empty(t, sync)
}
