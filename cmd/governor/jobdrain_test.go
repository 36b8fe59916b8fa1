package main

import (
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
