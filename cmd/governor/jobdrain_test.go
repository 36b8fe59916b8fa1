package main

import (
	"encoding/json"
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
// items in flight: the job starts no more items, the ones in flight are
// answered before Governor exits (not cut), and since the job's results go
// with the process, the log names the job, its counts and the items that
// did not run.
func TestSIGTERMLetsMemoryJobItemsFinish(t *testing.T) {
	mock, mockURL, stop, err := mockllm.Start(mockllm.Config{Latency: 1500 * time.Millisecond})
	require.NoError(t, err)
	defer stop()
	const n = 6

	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_DRAIN_TIMEOUT=30s")
	resp, err := oneShot.Post("http://"+g.base+"/governor/batches?max_retries=0&concurrency=2", "application/jsonl",
		strings.NewReader(durableJob(n)))
	require.NoError(t, err)
	var st struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool { s := mock.Stats(); return s.InFlight == 2 && s.Received == 2 },
		10*time.Second, time.Millisecond, "the job's first 2 items are at the provider")

	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, g.exitCode(t, 30*time.Second))
	after := mock.Stats()
	assert.Equal(t, int64(2), after.Received, "no item started after the signal")
	assert.Equal(t, int64(0), after.ClientGone, "the items in flight were not cut")
	assert.Equal(t, int64(2), after.Answered[200], "the items in flight were answered before Governor exited")

	lost := g.logLines(t, "batch job results lost at shutdown: kept in memory only, and not read to their end (set GOVERNOR_BATCH_DIR to keep jobs across restarts)")
	require.Len(t, lost, 1, g.logs())
	assert.Equal(t, "WARN", lost[0]["level"])
	assert.Equal(t, st.ID, lost[0]["batch"])
	assert.Equal(t, "shutdown", lost[0]["stopped"])
	assert.EqualValues(t, 2, lost[0]["completed"])
	assert.EqualValues(t, 4, lost[0]["did_not_run"])
	assert.Equal(t, []any{"item-2", "item-3", "item-4", "item-5"}, lost[0]["not_run"])
}
