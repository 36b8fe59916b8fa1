package batch_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/proxy"
)

// createJob posts an async batch and returns its status.
func (e *env) createJob(t *testing.T, body string) batch.JobStatus {
	t.Helper()
	resp, out := e.post(t, batch.PathBatches, "application/json", body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	var st batch.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	assert.Equal(t, batch.PathBatches+"/"+st.ID, resp.Header.Get("Location"))
	return st
}

func (e *env) jobStatus(t *testing.T, id string) batch.JobStatus {
	t.Helper()
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+id, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var st batch.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// waitJob polls a job until it has finished.
func (e *env) waitJob(t *testing.T, id string) batch.JobStatus {
	t.Helper()
	var st batch.JobStatus
	require.Eventually(t, func() bool {
		st = e.jobStatus(t, id)
		return st.FinishedAt != nil
	}, 20*time.Second, 10*time.Millisecond)
	return st
}

func TestAsyncJobCreatePollResults(t *testing.T) {
	e := newEnv(t, envOptions{})
	items := []any{
		chatItem("a", "one", map[string]string{"X-Mock-Latency": "300ms"}),
		chatItem("b", "two", nil),
		chatItem("c", "three", map[string]string{"X-Mock-Fault": "400"}),
	}
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": items}))
	assert.True(t, strings.HasPrefix(st.ID, "batch_"), st.ID)
	assert.Equal(t, batch.JobRunning, st.Status)
	assert.Equal(t, 3, st.Total)

	// Results are not ready while the slow item runs, unless partial.
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	assert.Equal(t, http.StatusConflict, resp.StatusCode, out)
	assert.Contains(t, out, "partial=true")
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results?partial=true", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var partial batch.Document
	require.NoError(t, json.Unmarshal([]byte(out), &partial))
	require.Len(t, partial.Details, 3)
	assert.Equal(t, batch.StatusPending, partial.Details[0].Status, "the slow item is still pending")

	st = e.waitJob(t, st.ID)
	assert.Equal(t, batch.JobCompleted, st.Status)
	assert.Equal(t, map[string]int{"COMPLETED": 2, "COMPLETED_WITH_RETRIES": 0, "FAILED": 1, "DID_NOT_RUN": 0}, st.Counts)
	require.NotNil(t, st.StartedAt)
	require.NotNil(t, st.ExpiresAt)
	assert.True(t, st.ExpiresAt.After(*st.FinishedAt))

	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var doc batch.Document
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "Simulated answer to: one", answerText(t, doc.Outputs[0]))
	assert.Equal(t, "Simulated answer to: two", answerText(t, doc.Outputs[1]))
	assert.Equal(t, proxy.StatusFailed, doc.Details[2].Status)

	// The list shows it; DELETE forgets a finished job.
	resp, out = e.do(t, http.MethodGet, batch.PathBatches, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, out, st.ID)
	resp, _ = e.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestAsyncJobCancel(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 40
	items := make([]any, n)
	for i := range items {
		items[i] = chatItem("", fmt.Sprintf("q%d", i), map[string]string{"X-Mock-Latency": "50ms"})
	}
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": items, "concurrency": 1}))
	require.Eventually(t, func() bool { return e.mock.Stats().Received >= 2 }, 10*time.Second, time.Millisecond)

	resp, out := e.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	st = e.waitJob(t, st.ID)
	assert.Equal(t, batch.JobCancelled, st.Status)
	assert.Equal(t, "cancelled", st.Stopped)
	assert.Positive(t, st.Counts["DID_NOT_RUN"])
	// The item in flight when the job was cancelled, if one was, is cut:
	// it did not run to its end either.
	assert.Zero(t, st.Counts["FAILED"], "%v", st.Counts)
	assert.Equal(t, n, st.Counts["COMPLETED"]+st.Counts["DID_NOT_RUN"], "every item has a row: %v", st.Counts)

	received := e.mock.Stats().Received - int64(st.Counts["COMPLETED"])
	assert.LessOrEqual(t, received, int64(1), "what did not run was never sent, but for the one cut in flight")
	var doc batch.Document
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, proxy.StatusDidNotRun, doc.Details[n-1].Status)
	assert.JSONEq(t, "null", string(doc.Outputs[n-1]))
}

func TestJobsAreBoundedAndExpire(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var clock = func() time.Time { return now }
	e := newEnv(t, envOptions{batch: func(c *batch.Config) {
		c.MaxJobs = 1
		c.TTL = time.Minute
		c.Now = func() time.Time { return clock() }
	}})
	body := mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}})
	st := e.createJob(t, body)
	e.waitJob(t, st.ID)
	now = now.Add(time.Minute) // the finished job expires
	resp, _ := e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	// A running job fills the store: a new one is refused.
	running := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "x", map[string]string{"X-Mock-Latency": "1h"})}}))
	resp, out := e.post(t, batch.PathBatches, "application/json", body)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the store is full of running jobs")
	assert.Contains(t, out, "too_many_batches")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp, _ = e.do(t, http.MethodDelete, batch.PathBatches+"/"+running.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	e.waitJob(t, running.ID)
	e.createJob(t, body)
}

// Past MaxJobs, a new job makes room only by forgetting a finished job
// its client is done with: results read to their end (as governor batch
// does), or deleted while it ran. A finished job nobody has read is kept
// until its TTL, and a new job meanwhile gets 503 too_many_batches.
func TestFinishedJobsMakeRoomOnlyOnceRead(t *testing.T) {
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxJobs = 2 }})
	body := mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}})
	status := func(id string) int {
		resp, _ := e.do(t, http.MethodGet, batch.PathBatches+"/"+id, "", "")
		return resp.StatusCode
	}
	unread := e.createJob(t, body)
	e.waitJob(t, unread.ID)
	partial := e.createJob(t, body)
	e.waitJob(t, partial.ID)
	// Its status is not its results.
	resp, _ := e.do(t, http.MethodGet, batch.PathBatches+"/"+partial.ID, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, out := e.post(t, batch.PathBatches, "application/json", body)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no finished job was read: none is forgotten")
	assert.Contains(t, out, "too_many_batches")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Equal(t, http.StatusOK, status(unread.ID), "unread results are kept until their TTL")
	assert.Equal(t, http.StatusOK, status(partial.ID))

	// Reading a job's results to the end lets a new job take its place;
	// the unread one, though it finished first, stays.
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+partial.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	third := e.createJob(t, body)
	e.waitJob(t, third.ID)
	assert.Equal(t, http.StatusNotFound, status(partial.ID), "the read job made room")
	assert.Equal(t, http.StatusOK, status(unread.ID), "the unread job is kept")

	// A job deleted while it ran is done with too.
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+third.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	running := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{
		chatItem("", "x", map[string]string{"X-Mock-Latency": "1h"})}}))
	resp, _ = e.do(t, http.MethodDelete, batch.PathBatches+"/"+running.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	e.waitJob(t, running.ID)
	e.createJob(t, body)
	assert.Equal(t, http.StatusNotFound, status(running.ID), "the deleted job made room")
	assert.Equal(t, http.StatusOK, status(unread.ID), "the unread job is still kept")
}

// A client that runs many jobs one after another and reads each one's
// results, as governor batch does, never fills the store.
func TestJobsWhoseResultsAreReadMakeRoom(t *testing.T) {
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxJobs = 2 }})
	body := mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}})
	for i := range 5 {
		st := e.createJob(t, body)
		e.waitJob(t, st.ID)
		resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "job %d: %s", i, out)
	}
}

func TestUnknownJobAndMethods(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, out := e.do(t, http.MethodGet, batch.PathBatches+"/batch_nope", "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, out, "batch_nope")
	resp, _ = e.do(t, http.MethodGet, batch.PathBatch, "", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
}

// Cancelling a job cuts its items in flight upstream: the provider sees the
// connection close at once (not when its answer is ready or the attempt
// times out), the item is DID_NOT_RUN after its one attempt, cut because
// the job was cancelled, and the lane's slot comes back.
func TestAsyncJobCancelCutsItemsInFlight(t *testing.T) {
	e := newEnv(t, envOptions{})
	items := []any{
		// Hangs until Governor closes the connection; so would every
		// retry.
		chatItem("held", "held back", map[string]string{"X-Mock-Fault": "hang,hang,hang,hang"}),
		chatItem("next", "never sent", nil),
	}
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": items, "concurrency": 1, "max_retries": 3, "timeout": "1h"}))
	require.Eventually(t, func() bool { return e.mock.Stats().Hangs == 1 }, 10*time.Second, time.Millisecond,
		"the first item is in flight")

	resp, out := e.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	st = e.waitJob(t, st.ID)
	assert.Equal(t, batch.JobCancelled, st.Status)
	assert.Equal(t, "cancelled", st.Stopped)
	assert.Equal(t, map[string]int{"COMPLETED": 0, "COMPLETED_WITH_RETRIES": 0, "FAILED": 0, "DID_NOT_RUN": 2}, st.Counts)
	require.Eventually(t, func() bool {
		ms := e.mock.Stats()
		return ms.ClientGone == 1 && ms.InFlight == 0
	}, 10*time.Second, 5*time.Millisecond, "the provider saw the item's connection close")
	assert.Equal(t, int64(1), e.mock.Stats().Received, "nothing retried, nothing more sent")

	var doc batch.Document
	resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	d := doc.Details[0]
	assert.Equal(t, proxy.StatusDidNotRun, d.Status)
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, []string{"cut: cancelled"}, d.Errors)
	assert.Zero(t, d.StatusCode, "the provider never answered")
	assert.JSONEq(t, "null", string(doc.Outputs[0]))
	assert.Equal(t, proxy.StatusDidNotRun, doc.Details[1].Status)

	resp, out = e.do(t, http.MethodGet, "/governor/lanes", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var lanes struct{ Lanes []lane.Info }
	require.NoError(t, json.Unmarshal([]byte(out), &lanes))
	require.Len(t, lanes.Lanes, 1)
	assert.Zero(t, lanes.Lanes[0].InFlight, "the lane's slot came back")
	assert.Zero(t, lanes.Lanes[0].Decreases, "the cut is no congestion signal")
}

// An item waiting to retry a 429 when its job is cancelled did not run to
// its end: it is DID_NOT_RUN, not a FAILED item that reads as the 429.
func TestAsyncJobCancelDuringRetryIsDidNotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.MaxPause = time.Hour }})
	items := []any{chatItem("held", "x", map[string]string{
		"X-Request-Id": "held", "X-Mock-Fault": "429,429", "X-Mock-Retry-After": "3600"})}
	body := `{"custom_id":"held","url":"/v1/chat/completions","headers":{"X-Request-Id":"held","X-Mock-Fault":"429,429","X-Mock-Retry-After":"3600"},"body":{"model":"m","messages":[]}}`
	for _, c := range []struct{ contentType, body, model string }{
		{"application/json", mustJSON(t, map[string]any{"requests": items, "max_retries": 3}), "gpt-test"},
		{"application/jsonl", body, "m"},
	} {
		resp, out := e.post(t, batch.PathBatches, c.contentType, c.body)
		require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
		var st batch.JobStatus
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		require.Eventually(t, func() bool { return e.lanePaused(t, c.model) }, 10*time.Second, time.Millisecond,
			"the 429's Retry-After holds the retry")
		resp, out = e.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
		require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
		st = e.waitJob(t, st.ID)
		assert.Equal(t, 1, st.Counts["DID_NOT_RUN"], "%s: %v", c.contentType, st.Counts)
		_, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
		if c.contentType == "application/jsonl" {
			assert.Contains(t, out, `"response":null`)
			assert.Contains(t, out, `"code":"did_not_run"`)
			continue
		}
		var doc batch.Document
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
		d := doc.Details[0]
		assert.Equal(t, proxy.StatusDidNotRun, d.Status)
		assert.Equal(t, 1, d.Attempts, "the attempt it made is still shown")
		assert.Equal(t, []string{"429 rate_limit_exceeded"}, d.Errors)
		assert.Zero(t, d.StatusCode, "no answer is its outcome")
	}
}

// lanePaused reports whether the lane of model waits out a provider's
// Retry-After.
func (e *env) lanePaused(t *testing.T, model string) bool {
	_, out := e.do(t, http.MethodGet, "/governor/lanes", "", "")
	var lanes struct{ Lanes []lane.Info }
	require.NoError(t, json.Unmarshal([]byte(out), &lanes))
	for _, l := range lanes.Lanes {
		if l.Model == model && l.PausedUntil != nil {
			return true
		}
	}
	return false
}

// POST /governor/batches/{id}/cancel cancels a running job as DELETE
// does, but never forgets one: sent again, or once the job has finished
// by itself, it answers the job's status and leaves its results to
// fetch, where a second DELETE would forget them. A job so cancelled is
// not done with until its results are read.
func TestCancelTwiceKeepsTheResults(t *testing.T) {
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.MaxJobs = 2 }})
	cancel := func(id string) (*http.Response, batch.JobStatus) {
		t.Helper()
		resp, out := e.do(t, http.MethodPost, batch.PathBatches+"/"+id+"/cancel", "", "")
		var st batch.JobStatus
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		return resp, st
	}
	items := []any{chatItem("a", "quick", nil), chatItem("b", "slow", map[string]string{"X-Mock-Latency": "1h"})}
	running := e.createJob(t, mustJSON(t, map[string]any{"requests": items, "concurrency": 1}))
	require.Eventually(t, func() bool { return e.mock.Stats().Received >= 2 }, 10*time.Second, time.Millisecond)
	resp, _ := cancel(running.ID)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	e.waitJob(t, running.ID)
	resp, st := cancel(running.ID)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a finished job's cancel answers its status")
	assert.Equal(t, batch.JobCancelled, st.Status)
	assert.Equal(t, 1, st.Counts["COMPLETED"])

	finished := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{chatItem("c", "x", nil)}}))
	e.waitJob(t, finished.ID)
	resp, st = cancel(finished.ID)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, batch.JobCompleted, st.Status, "a job that finished by itself stays completed")

	resp, out := e.post(t, batch.PathBatches, "application/json", mustJSON(t, map[string]any{"requests": []any{chatItem("", "x", nil)}}))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "neither job is done with: %s", out)
	for _, id := range []string{running.ID, finished.ID} {
		resp, out = e.do(t, http.MethodGet, batch.PathBatches+"/"+id+"/results", "", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", id, out)
		var doc batch.Document
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		assert.Equal(t, proxy.StatusCompleted, doc.Details[0].Status, id)
	}
	resp, _ = e.do(t, http.MethodGet, batch.PathBatches+"/"+running.ID+"/cancel", "", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
}
