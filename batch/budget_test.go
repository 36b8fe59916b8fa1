package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/proxy"
)

const memoryGauge = "governor_batch_results_memory_bytes"

// answerBytes is the size of the answer to chatItem("", "same", nil), as
// an async job holds it.
func answerBytes(t *testing.T) int {
	e := newEnv(t, envOptions{})
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{chatItem("", "same", nil)}}))
	e.waitJob(t, st.ID)
	n := e.counter(t, memoryGauge)
	require.Positive(t, n)
	return n
}

// Without a batch directory, the answers async jobs hold in memory are
// bounded: the job that finished first is forgotten early to make room;
// while running jobs fill the bound, new jobs get 503 and an answer that
// does not fit is dropped, its item FAILED saying why.
func TestResultsHeldInMemoryAreBounded(t *testing.T) {
	t.Parallel()
	size := answerBytes(t)
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxResultBytes = int64(2 * size) }})
	one := mustJSON(t, map[string]any{"requests": []any{chatItem("", "same", nil)}})

	a := e.waitJob(t, e.createJob(t, one).ID)
	b := e.waitJob(t, e.createJob(t, one).ID)
	assert.Equal(t, 2*size, e.counter(t, memoryGauge), "full")
	c := e.waitJob(t, e.createJob(t, one).ID)
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+a.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the job that finished first made room: %s", out)
	assert.Contains(t, out, "Config.MaxResultBytes")
	for _, j := range []batch.JobStatus{b, c} {
		assert.Equal(t, 1, e.jobStatus(t, j.ID).Counts["COMPLETED"], j.ID)
	}

	// A running job that fills the bound: two answers held, the third
	// item hangs.
	held := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "same", nil), chatItem("", "same", nil),
		chatItem("", "same", map[string]string{"X-Mock-Fault": "hang"}),
	}, "concurrency": 1, "max_retries": 0}))
	require.Eventually(t, func() bool { return e.mock.Stats().Hangs == 1 }, 10*time.Second, time.Millisecond)
	for _, j := range []batch.JobStatus{b, c} {
		resp, _ := e.do(t, http.MethodGet, batch.PathBatches+"/"+j.ID, "", "")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s forgotten for the running job's answers", j.ID)
	}
	resp, out = e.post(t, batch.PathBatches, "application/json", one)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, out)
	assert.Contains(t, out, "results_memory_full")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	// Once it is cancelled (finished), it makes room in turn.
	resp, _ = e.do(t, http.MethodDelete, batch.PathBatches+"/"+held.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	e.waitJob(t, held.ID)
	e.waitJob(t, e.createJob(t, one).ID)
	assert.LessOrEqual(t, e.counter(t, memoryGauge), 2*size)

	// Answers of one job beyond the bound are dropped, not held.
	three := mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "same", nil), chatItem("", "same", nil), chatItem("", "same", nil)}, "concurrency": 1})
	st := e.waitJob(t, e.createJob(t, three).ID)
	assert.Equal(t, map[string]int{"COMPLETED": 2, "COMPLETED_WITH_RETRIES": 0, "FAILED": 1, "DID_NOT_RUN": 0}, st.Counts)
	_, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	var doc batch.Document
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	d := doc.Details[2]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, []string{"results_memory_full"}, d.Errors)
	assert.Equal(t, 2*size, e.counter(t, memoryGauge), "never above the bound")
}

// With a batch directory, answers are on disk: nothing is held in memory.
// Making room for answers, a job whose results were read goes before one
// whose results nobody has read yet, though that one finished first.
func TestResultsAlreadyReadAreForgottenFirst(t *testing.T) {
	t.Parallel()
	size := answerBytes(t)
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxResultBytes = int64(2 * size) }})
	one := mustJSON(t, map[string]any{"requests": []any{chatItem("", "same", nil)}})

	unread := e.waitJob(t, e.createJob(t, one).ID)
	read := e.waitJob(t, e.createJob(t, one).ID)
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+read.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	e.waitJob(t, e.createJob(t, one).ID)
	resp, _ = e.do(t, http.MethodGet, batch.PathBatches+"/"+read.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the job already read made room")
	assert.Equal(t, 1, e.jobStatus(t, unread.ID).Counts["COMPLETED"], "the unread job is kept")
}

func TestResultsOnDiskHoldNoMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.Dir = t.TempDir(); c.MaxResultBytes = 1 }})
	items := make([]any, 5)
	for i := range items {
		items[i] = chatItem("", fmt.Sprintf("q%d", i), nil)
	}
	st := e.waitJob(t, e.createJob(t, mustJSON(t, map[string]any{"requests": items})).ID)
	assert.Equal(t, 5, st.Counts["COMPLETED"])
	assert.Zero(t, e.counter(t, memoryGauge))
}

// A sync batch answered with a document holds its answers until the
// document is written: they count against the same bound as async jobs',
// so an answer beyond it is dropped (its item FAILED, saying why), a new
// sync batch gets 503 while running batches fill it, and the room comes
// back once the document is written. Progress lines keep nothing: the same
// items all complete that way.
func TestSyncBatchAnswersAreBounded(t *testing.T) {
	t.Parallel()
	size := answerBytes(t)
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxResultBytes = int64(2 * size) }})
	three := mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "same", nil), chatItem("", "same", nil), chatItem("", "same", nil)}, "concurrency": 1})

	doc := e.runBatch(t, three)
	assert.Equal(t, 2, doc.Summary.Completed)
	d := doc.Details[2]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, []string{"results_memory_full"}, d.Errors)
	require.Eventually(t, func() bool { return e.counter(t, memoryGauge) == 0 }, 10*time.Second, time.Millisecond,
		"the answers are let go once the document is written")

	resp, out := e.post(t, batch.PathBatch, "application/json", three, "Accept", "application/x-ndjson")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	assert.Contains(t, out, `"COMPLETED":3`, "progress lines hold no answers")

	// A sync batch that fills the bound, its third item hanging: a new
	// sync batch is refused until the first one ends.
	held := mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "same", nil), chatItem("", "same", nil),
		chatItem("", "same", map[string]string{"X-Mock-Fault": "hang"}),
	}, "concurrency": 1, "max_retries": 0, "timeout": "1h"})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+batch.PathBatch, strings.NewReader(held))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	gone := make(chan error, 1)
	go func() {
		resp, err := e.c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	require.Eventually(t, func() bool { return e.mock.Stats().Hangs == 1 }, 10*time.Second, time.Millisecond)
	resp, out = e.post(t, batch.PathBatch, "application/json", three)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, out)
	assert.Contains(t, out, "results_memory_full")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	cancel() // the client leaves: the batch is cancelled, its answers let go
	<-gone
	require.Eventually(t, func() bool { return e.counter(t, memoryGauge) == 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 2, e.runBatch(t, three).Summary.Completed)
}
