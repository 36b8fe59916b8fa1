//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/llmgovernor/governor/mockllm"
)

// fullJobStatus is GET /governor/batches/{id} as a test of a full batch
// directory reads it.
type fullJobStatus struct {
	Status  string
	Counts  map[string]int
	Stalled string
	Stopped string
}

func fullJobState(t *testing.T, g *governorProcess, id string) fullJobStatus {
	t.Helper()
	resp, err := oneShot.Get("http://" + g.base + "/governor/batches/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st fullJobStatus
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// limitFileSize sets the size beyond which the governor process cannot
// write a file (RLIMIT_FSIZE, what `ulimit -f` sets): its writes past it
// fail with EFBIG, as they fail with ENOSPC on a full disk.
func limitFileSize(t *testing.T, g *governorProcess, bytes uint64) {
	t.Helper()
	var old unix.Rlimit
	require.NoError(t, unix.Prlimit(g.cmd.Process.Pid, unix.RLIMIT_FSIZE, nil, &old))
	require.NoError(t, unix.Prlimit(g.cmd.Process.Pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: min(bytes, old.Max), Max: old.Max}, nil))
}

// waitStalled waits until the job says it is stalled, or has stopped
// running, and returns its status.
func waitStalled(t *testing.T, g *governorProcess, id string) fullJobStatus {
	t.Helper()
	var st fullJobStatus
	require.Eventually(t, func() bool {
		st = fullJobState(t, g, id)
		return st.Stalled != "" || st.Status != "running"
	}, 20*time.Second, 5*time.Millisecond)
	return st
}

// A batch directory that stops taking results (a full disk; here a file
// size limit) pauses a running job instead of ending it: the job stays
// running and says why, starts nothing more than the items it had under
// way, and goes on by itself, sending no item twice, once the directory
// takes results again. Stopped while it waits, Governor exits without
// waiting for the disk, and the job completes after a restart.
func TestFullBatchDirectoryPausesTheJob(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 2 * time.Millisecond})
	dir := t.TempDir()
	// A window of 8 items (twice the concurrency).
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_MAX_CONCURRENCY=4", "GOVERNOR_DRAIN_TIMEOUT=30s"}
	const n, window = 150, 8
	// The job's input fits; its journal (about 600 bytes a result) does not.
	const limit = 48 << 10

	g := startGovernor(t, env...)
	limitFileSize(t, g, limit)
	id := submitJob(t, g, durableJob(n))
	// governor batch, following the job, says it is stalled, and when it
	// goes on.
	out := filepath.Join(t.TempDir(), "results.jsonl")
	c := startCLI(t, noKeys, "-url", "http://"+g.base, "-job", id, "-o", out, "-poll", "20ms")
	st := waitStalled(t, g, id)
	require.Equal(t, "running", st.Status, "the job waits for room rather than ending (stopped: %q)", st.Stopped)
	assert.Contains(t, st.Stalled, "file too large", "the status says why")
	assert.Zero(t, st.Counts["DID_NOT_RUN"])
	// Each of the window's workers holds at most one item sent and not
	// yet counted, so the items sent are at most those counted plus the
	// window: the count read after them, since a result written before
	// the directory filled up may still be counted (its sync to disk under
	// way) and its worker send one more item.
	received := mock.Stats().Received
	recorded := fullJobState(t, g, id).Counts["COMPLETED"]
	assert.Greater(t, recorded, 0)
	assert.Less(t, recorded, n)
	assert.LessOrEqual(t, received, int64(recorded+window),
		"only the items under way when the directory filled up were sent")
	// Logged once the status says so.
	assert.Eventually(t, func() bool { return strings.Contains(g.logs(), "batch job stalled") }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.Contains(c.stderrText(), "job "+id+" is stalled: results cannot be written")
	},
		10*time.Second, 5*time.Millisecond, "governor batch says why the job does not progress")

	limitFileSize(t, g, unix.RLIM_INFINITY)
	require.Eventually(t, func() bool { return fullJobState(t, g, id).Status != "running" },
		30*time.Second, 10*time.Millisecond, "the job goes on by itself")
	st = fullJobState(t, g, id)
	assert.Equal(t, "completed", st.Status)
	assert.Empty(t, st.Stalled)
	assert.Equal(t, n, st.Counts["COMPLETED"])
	require.Equal(t, 0, c.exitCode(t, 30*time.Second))
	assert.Contains(t, c.stderrText(), "job "+id+" goes on")
	assert.Len(t, readResults(t, out), n)
	lines := resultLines(t, g, id, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	for i, l := range lines {
		want := fmt.Sprintf("item-%d", i)
		require.Equal(t, want, l.CustomID, "results in input order")
		require.NotNil(t, l.Response, want)
		assert.Equal(t, 200, l.Response.StatusCode, want)
		assert.Equal(t, int64(1), counts[want], "%s sent once", want)
	}

	// Full again, then SIGTERM: the answers waiting for the disk are not
	// recorded, and their items run again after the restart.
	limitFileSize(t, g, limit)
	other := submitJob(t, g, strings.ReplaceAll(durableJob(n), "item-", "other-"))
	st = waitStalled(t, g, other)
	require.Equal(t, "running", st.Status, "stopped: %q", st.Stopped)
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second), "the drain does not wait for the disk")

	before := mock.Stats().ByRequestID
	g = startGovernor(t, env...)
	require.Eventually(t, func() bool { return fullJobState(t, g, other).Status != "running" },
		30*time.Second, 10*time.Millisecond, "the job resumes and completes")
	st = fullJobState(t, g, other)
	assert.Equal(t, "completed", st.Status)
	after := mock.Stats().ByRequestID
	resent := 0
	for i := range n {
		want := fmt.Sprintf("other-%d", i)
		assert.LessOrEqual(t, after[want], int64(2), want)
		if before[want] > 0 && after[want] > before[want] {
			resent++
		}
	}
	assert.LessOrEqual(t, resent, window, "only the answers that waited for the disk are asked again")
	// An item asked again counts its send before the restart: completed
	// with retries.
	assert.Equal(t, resent, st.Counts["COMPLETED_WITH_RETRIES"])
	assert.Equal(t, n-resent, st.Counts["COMPLETED"])
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
}

// A job DELETEd while its batch directory is full (its cancellation cannot
// be written to the journal either) stays cancelled: after a restart on
// the directory, with room again, it is not resumed and sends nothing more.
func TestJobCancelledOnAFullBatchDirectoryStaysCancelled(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 2 * time.Millisecond})
	dir := t.TempDir()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_MAX_CONCURRENCY=4", "GOVERNOR_DRAIN_TIMEOUT=30s"}
	const n = 150

	g := startGovernor(t, env...)
	limitFileSize(t, g, 48<<10)
	id := submitJob(t, g, durableJob(n))
	st := waitStalled(t, g, id)
	require.Equal(t, "running", st.Status, "stopped: %q", st.Stopped)

	req, err := http.NewRequest(http.MethodDelete, "http://"+g.base+"/governor/batches/"+id, nil)
	require.NoError(t, err)
	resp, err := oneShot.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool { return fullJobState(t, g, id).Status == "cancelled" }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, g.exitCode(t, 10*time.Second))
	sent := mock.Stats().Received

	g = startGovernor(t, env...)
	require.Eventually(t, func() bool { st = fullJobState(t, g, id); return st.Status != "running" },
		10*time.Second, 5*time.Millisecond)
	assert.Equal(t, "cancelled", st.Status, "a cancelled job is never resumed")
	assert.Positive(t, st.Counts["DID_NOT_RUN"])
	assert.Equal(t, sent, mock.Stats().Received, "nothing more sent for it")
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
}
