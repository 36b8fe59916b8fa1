package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// SIGTERM while an async job held in memory (no GOVERNOR_BATCH_DIR) has
// items in flight, and nobody reads its results within the drain: the job
// starts no more items, the ones in flight are answered before Governor
// exits (not cut), and since the job's results go with the process, the
// log names the job, its counts and the items that did not run.
func TestSIGTERMLetsMemoryJobItemsFinish(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 1500 * time.Millisecond})
	const n = 6

	// The drain waits for the job, which nobody reads, to its timeout:
	// long enough for items of 1.5 s on a loaded machine.
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_DRAIN_TIMEOUT=10s")
	id := drainWithTwoItemsInFlight(t, g, mock, n)

	lost := g.logLines(t, "batch job results lost at shutdown: kept in memory only, and not read to their end (set GOVERNOR_BATCH_DIR to keep jobs across restarts)")
	require.Len(t, lost, 1, g.logs())
	assert.Equal(t, "WARN", lost[0]["level"])
	assert.Equal(t, id, lost[0]["batch"])
	assert.Equal(t, "shutdown", lost[0]["stopped"])
	assert.EqualValues(t, 2, lost[0]["completed"])
	assert.EqualValues(t, 4, lost[0]["did_not_run"])
	assert.Equal(t, []any{"item-2", "item-3", "item-4", "item-5"}, lost[0]["not_run"])
}

// SIGTERM while an async job held in memory has items in flight: the
// main listener stays open for its results. A client polls the job until
// it has finished, during the drain, and fetches its results (the items
// in flight answered, the others DID_NOT_RUN); Governor then exits
// without waiting for the drain timeout and without reporting them lost.
// Meanwhile new work is refused with 503 draining: a call to forward, a
// new job, a sync batch.
func TestMemoryJobResultsFetchedDuringTheDrain(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 1500 * time.Millisecond})
	const n = 6

	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_DRAIN_TIMEOUT=60s")
	resp, err := oneShot.Post("http://"+g.base+"/governor/batches?max_retries=0&concurrency=2", "application/jsonl",
		strings.NewReader(durableJob(n)))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	id := jobID(t, body)
	require.Eventually(t, func() bool { s := mock.Stats(); return s.InFlight == 2 && s.Received == 2 },
		10*time.Second, time.Millisecond, "the job's first 2 items are at the provider")

	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		return len(g.logLines(t, "draining: new calls refused; batch job results held in memory are served until read or deleted")) == 1
	}, 5*time.Second, 5*time.Millisecond, "the drain says it serves the job's results")
	assert.Equal(t, 503, g.readyz(), "not ready while draining")

	for _, work := range []struct{ name, path, contentType, body string }{
		{"a call to forward", "/v1/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"a new job", "/governor/batches", "application/jsonl", durableJob(1)},
		{"a sync batch", "/governor/batch", "application/jsonl", durableJob(1)},
	} {
		resp, err := oneShot.Post("http://"+g.base+work.path, work.contentType, strings.NewReader(work.body))
		require.NoError(t, err, "%s: the listener is open during the drain", work.name)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", work.name, out)
		assert.Contains(t, string(out), `"code":"draining"`, work.name)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"), work.name)
	}

	require.Eventually(t, func() bool { _, st := durableJobState(t, g, id); return st != "running" },
		20*time.Second, 10*time.Millisecond, "the job ends during the drain, its items in flight answered")
	lines := resultLines(t, g, id, false)
	require.Len(t, lines, n)
	for i, l := range lines {
		if i < 2 {
			require.NotNil(t, l.Response, "%s was in flight at the signal: answered", l.CustomID)
			assert.Equal(t, 200, l.Response.StatusCode, l.CustomID)
		} else {
			require.NotNil(t, l.Error, "%s had not started", l.CustomID)
			assert.Equal(t, "did_not_run", l.Error.Code, l.CustomID)
		}
	}

	require.Equal(t, 0, g.exitCode(t, 30*time.Second), "Governor exits once the results are read, before the drain timeout")
	assert.Len(t, g.logLines(t, "the results of every batch job held in memory were read or deleted"), 1, g.logs())
	assert.Empty(t, g.logLines(t, "batch job results lost at shutdown: kept in memory only, and not read to their end (set GOVERNOR_BATCH_DIR to keep jobs across restarts)"))
	after := mock.Stats()
	assert.Equal(t, int64(2), after.Received, "nothing refused during the drain reached the provider")
	assert.Equal(t, int64(0), after.ClientGone, "the items in flight were not cut")
}

// jobID is the id in the answer to a new job.
func jobID(t *testing.T, body []byte) string {
	t.Helper()
	var st struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &st), string(body))
	require.NotEmpty(t, st.ID, string(body))
	return st.ID
}
