package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/mockllm"
)

// jsonlJob is n chat completions in the OpenAI Batch format, item i with
// custom_id and X-Request-Id "r<i>", each answered after latency.
func jsonlJob(n int, latency string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","headers":{"X-Request-Id":"r%d","X-Mock-Latency":%q},"body":{"model":"m","messages":[{"role":"user","content":"q%d"}]}}`+"\n", i, i, latency, i)
	}
	return b.String()
}

func (e *env) createJSONLJob(t *testing.T, body string) batch.JobStatus {
	t.Helper()
	resp, out := e.post(t, batch.PathBatches+"?concurrency=2&max_retries=0", "application/jsonl", body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	var st batch.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// jsonlResults returns a JSONL job's result lines, decoded.
func (e *env) jsonlResults(t *testing.T, id string, partial bool) (string, []map[string]any) {
	t.Helper()
	path := batch.PathBatches + "/" + id + "/results"
	if partial {
		path += "?partial=true"
	}
	resp, out := e.do(t, http.MethodGet, path, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &v), l)
		lines = append(lines, v)
	}
	return out, lines
}

// A job stopped by Governor's shutdown resumes when a Governor opens the
// same batch directory: every item ends up answered, in input order, and
// no item whose result was recorded is sent again.
func TestDurableJobResumesAfterRestart(t *testing.T) {
	mock, _, opts := restartable(t)
	const n = 20

	e1 := newEnv(t, opts)
	st := e1.createJSONLJob(t, jsonlJob(n, "20ms"))
	require.Eventually(t, func() bool { return mock.Stats().Received >= 6 }, 10*time.Second, time.Millisecond)
	_, partial := e1.jsonlResults(t, st.ID, true)
	sent := mock.Stats().ByRequestID
	e1.stop()
	recorded := map[string]int64{}
	for _, l := range partial {
		if l["response"] != nil {
			recorded[l["custom_id"].(string)] = sent[l["custom_id"].(string)]
		}
	}
	require.NotEmpty(t, recorded)

	e2 := newEnv(t, opts)
	resumed := e2.waitJob(t, st.ID)
	assert.Equal(t, st.CreatedAt, resumed.CreatedAt)
	assert.Equal(t, st.StartedAt, resumed.StartedAt, "the same job, started once")
	st = resumed
	assert.Equal(t, batch.JobCompleted, st.Status)
	assert.Equal(t, n, st.Counts["COMPLETED"], "%v", st.Counts)
	_, lines := e2.jsonlResults(t, st.ID, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	var again int64
	for i, l := range lines {
		id := fmt.Sprintf("r%d", i)
		require.Equal(t, id, l["custom_id"], "input order")
		resp, _ := l["response"].(map[string]any)
		require.NotNil(t, resp, id)
		assert.EqualValues(t, 200, resp["status_code"], id)
		if before, ok := recorded[id]; ok {
			assert.Equal(t, before, counts[id], "%s was recorded: not sent again", id)
		}
		again += counts[id] - 1
	}
	assert.LessOrEqual(t, again, int64(2), "only the 2 items in flight at the stop are sent again")
}

// A finished job is listed again after a restart, with the same results,
// and expires from the directory after the TTL.
func TestDurableFinishedJobAfterRestartAndExpiry(t *testing.T) {
	mock, mockURL, stopMock, err := mockllm.Start(mockllm.Config{})
	require.NoError(t, err)
	t.Cleanup(stopMock)
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	opts := envOptions{upstream: mock, mockURL: mockURL, batch: func(c *batch.Config) {
		c.Dir = dir
		c.TTL = time.Hour
		c.Now = clock
	}}

	e1 := newEnv(t, opts)
	items := []any{chatItem("a", "one", nil), chatItem("b", "two", map[string]string{"X-Mock-Fault": "400"})}
	st := e1.createJob(t, mustJSON(t, map[string]any{"requests": items, "fallback": "none"}))
	st = e1.waitJob(t, st.ID)
	_, before := e1.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	e1.stop()

	e2 := newEnv(t, opts)
	again := e2.jobStatus(t, st.ID)
	assert.Equal(t, st, again, "the same status after a restart")
	resp, after := e2.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, before, after, "the same results after a restart")
	var doc batch.Document
	require.NoError(t, json.Unmarshal([]byte(after), &doc))
	assert.Equal(t, "Simulated answer to: one", answerText(t, doc.Outputs[0]))
	assert.JSONEq(t, `"none"`, string(doc.Outputs[1]))
	assert.Equal(t, int64(2), mock.Stats().Received, "nothing sent again")
	assert.NoFileExists(t, filepath.Join(dir, "jobs", st.ID, "secret"), "a finished job keeps no credentials")

	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	resp, out := e2.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID, "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, out, "expire 1h0m0s after they finish")
	assert.NotContains(t, out, "in memory", "results on disk are not forgotten for memory")
	assert.NoDirExists(t, filepath.Join(dir, "jobs", st.ID), "expired on disk too")
}

func TestDurableDeleteRemovesTheJob(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.Dir = dir }})
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{chatItem("a", "one", nil)}}))
	e.waitJob(t, st.ID)
	require.DirExists(t, filepath.Join(dir, "jobs", st.ID))
	resp, _ := e.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.NoDirExists(t, filepath.Join(dir, "jobs", st.ID))
}

// A cancelled job stays cancelled after a restart: nothing more is sent.
func TestDurableCancelledJobStaysCancelled(t *testing.T) {
	mock, _, opts := restartable(t)
	e1 := newEnv(t, opts)
	st := e1.createJSONLJob(t, jsonlJob(10, "1h"))
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 2 }, 10*time.Second, time.Millisecond)
	resp, out := e1.do(t, http.MethodDelete, batch.PathBatches+"/"+st.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	st = e1.waitJob(t, st.ID)
	e1.stop()

	e2 := newEnv(t, opts)
	again := e2.jobStatus(t, st.ID)
	assert.Equal(t, batch.JobCancelled, again.Status)
	assert.Equal(t, st.Counts, again.Counts)
	assert.Equal(t, int64(2), mock.Stats().Received)
}

// A Governor started on a batch directory that another process holds (an
// old pod still draining on the same volume) starts all the same: sync
// batches run, the async job endpoints answer 503 batch_directory_busy,
// and once the other lets the directory go its jobs are listed and
// resumed here.
func TestBatchDirectoryInUseIsTakenOnceFree(t *testing.T) {
	mock, _, opts := restartable(t)
	const n = 10

	old := newEnv(t, opts)
	st := old.createJSONLJob(t, jsonlJob(n, "50ms"))
	e := newEnv(t, opts)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, batch.PathBatches, jsonlJob(1, "1ms")},
		{http.MethodGet, batch.PathBatches, ""},
		{http.MethodGet, batch.PathBatches + "/" + st.ID, ""},
		{http.MethodGet, batch.PathBatches + "/" + st.ID + "/results?partial=true", ""},
		{http.MethodDelete, batch.PathBatches + "/" + st.ID, ""},
	} {
		resp, out := e.do(t, tc.method, tc.path, "application/jsonl", tc.body)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s", tc.method, tc.path)
		assert.Equal(t, "5", resp.Header.Get("Retry-After"))
		assert.Contains(t, out, `"code":"batch_directory_busy"`)
		assert.Contains(t, out, "in use by another process")
	}
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{chatItem("a", "x", nil)}}))
	assert.Equal(t, 1, doc.Summary.Completed, "sync batches run meanwhile")
	assert.Equal(t, batch.JobRunning, old.jobStatus(t, st.ID).Status, "the other keeps its job")

	old.stop()
	require.Eventually(t, func() bool {
		resp, _ := e.do(t, http.MethodGet, batch.PathBatches, "", "")
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 5*time.Millisecond, "the directory is taken once let go")
	done := e.waitJob(t, st.ID)
	assert.Equal(t, batch.JobCompleted, done.Status)
	assert.Equal(t, n, done.Counts["COMPLETED"], "%v", done.Counts)
	_, lines := e.jsonlResults(t, st.ID, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	var again int64
	for i, l := range lines {
		id := fmt.Sprintf("r%d", i)
		require.Equal(t, id, l["custom_id"], "input order")
		require.NotNil(t, l["response"], id)
		again += counts[id] - 1
	}
	assert.LessOrEqual(t, again, int64(2), "only the 2 items in flight at the stop are sent again")
}

// A batch directory that cannot be opened at all is an error at start.
func TestUnusableBatchDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := batch.New(nil, batch.Config{Dir: filepath.Join(file, "dir"), Metrics: metrics.NewSet()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a directory")
}

// A finished job whose TTL ran out while Governor was down is removed from
// the directory at start-up, before anyone asks for it.
func TestDurableJobExpiredWhileDown(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	opts := envOptions{batch: func(c *batch.Config) {
		c.Dir = dir
		c.TTL = time.Hour
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	}}
	e1 := newEnv(t, opts)
	st := e1.waitJob(t, e1.createJob(t, mustJSON(t, map[string]any{"requests": []any{chatItem("a", "one", nil)}})).ID)
	e1.stop()
	require.DirExists(t, filepath.Join(dir, "jobs", st.ID))

	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	newEnv(t, opts)
	assert.NoDirExists(t, filepath.Join(dir, "jobs", st.ID))
}

// Items of a job kept in a batch directory that are still in flight when
// Shutdown's ctx ends are cut, not recorded: they stay pending and run
// again after a restart.
func TestDurableShutdownCutsItemsAtTheDeadline(t *testing.T) {
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.Dir = t.TempDir() }})
	st := e.createJSONLJob(t, jsonlJob(4, "1h"))
	require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 2 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, e.batches.Shutdown(ctx), context.DeadlineExceeded)
	require.Eventually(t, func() bool { return e.mock.Stats().ClientGone == 2 }, 10*time.Second, time.Millisecond,
		"the items in flight are cut at the deadline")
	st = e.jobStatus(t, st.ID)
	assert.Equal(t, map[string]int{"PENDING": 4}, nonZero(st.Counts), "nothing recorded, nothing DID_NOT_RUN")
	assert.Equal(t, int64(2), e.mock.Stats().Received, "no item started after Shutdown")
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// Credentials an item carries in its own headers are kept on disk only
// with the request's, in the job's secret, which goes when the job
// finishes: never in its input, which stays until the job expires (and for
// good in damaged/ if it is damaged). A job resumed after a restart still
// sends each item with its headers.
func TestItemHeadersLeaveTheDiskWithTheJob(t *testing.T) {
	mock, dir, opts := restartable(t)
	const canary = "sk-item-canary-5f3a"
	const n = 6
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","headers":{"X-Request-Id":"r%d","X-Mock-Latency":"20ms","Authorization":"Bearer %s"},"body":{"model":"m","messages":[{"role":"user","content":"q"}]}}`+"\n", i, i, canary)
	}
	filesWithCanary := func() []string {
		var found []string
		require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil && strings.Contains(string(b), canary) {
				found = append(found, filepath.Base(path))
			}
			return err
		}))
		return found
	}

	e1 := newEnv(t, opts)
	st := e1.createJSONLJob(t, body.String())
	require.Eventually(t, func() bool { return mock.Stats().Received >= 2 }, 10*time.Second, time.Millisecond)
	e1.stop()
	assert.Equal(t, []string{"secret"}, filesWithCanary(), "while the job runs, only its secret holds them")

	e2 := newEnv(t, opts)
	st = e2.waitJob(t, st.ID)
	assert.Equal(t, n, st.Counts["COMPLETED"], "%v", st.Counts)
	seen := mock.Stats().ByRequestID
	for i := range n {
		assert.Positive(t, seen[fmt.Sprintf("r%d", i)], "item %d sent with its headers", i)
	}
	assert.Empty(t, filesWithCanary(), "the job has finished: no credential left on disk")
}
