package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// durableJob is an async JSONL job of n chat completions, item i with
// custom_id and X-Request-Id "item-i", so that the provider counts each
// item's sends.
func durableJob(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"item-%d","method":"POST","url":"/v1/chat/completions","headers":{"X-Request-Id":"item-%d"},"body":{"model":"m","messages":[{"role":"user","content":"item %d"}]}}`+"\n", i, i, i)
	}
	return b.String()
}

func submitJob(t *testing.T, g *governorProcess, body string) string {
	t.Helper()
	resp, err := oneShot.Post("http://"+g.base+"/governor/batches?max_retries=0", "application/jsonl", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(out))
	var st struct{ ID string }
	require.NoError(t, json.Unmarshal(out, &st))
	return st.ID
}

// durableJobState is GET /governor/batches/{id}: its status, or 404.
func durableJobState(t *testing.T, g *governorProcess, id string) (int, string) {
	t.Helper()
	resp, err := oneShot.Get("http://" + g.base + "/governor/batches/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct{ Status string }
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return resp.StatusCode, st.Status
}

// resultLines fetches a JSONL job's results (partial ones while it runs).
func resultLines(t *testing.T, g *governorProcess, id string, partial bool) []outLine {
	t.Helper()
	url := "http://" + g.base + "/governor/batches/" + id + "/results"
	if partial {
		url += "?partial=true"
	}
	resp, err := oneShot.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var lines []outLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l outLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), sc.Text())
		lines = append(lines, l)
	}
	require.NoError(t, sc.Err())
	return lines
}

type outLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int `json:"status_code"`
		Body       struct {
			Choices []struct{ Message struct{ Content string } }
		}
	}
	Error *struct{ Code string }
}

// A Governor killed with SIGKILL mid-job, again and again, and started on
// the same batch directory finishes the job: every result, in input order,
// and no item whose result was recorded before a kill is sent again.
func TestKilledMidJobResumesFromTheBatchDirectory(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 15 * time.Millisecond})
	dir := t.TempDir()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_MAX_CONCURRENCY=8"}
	const n = 400

	g := startGovernor(t, env...)
	id := submitJob(t, g, durableJob(n))
	// Sends of each item seen completed before a kill, as the provider
	// counted them then: they must not grow.
	recorded := map[string]int64{}
	for kill := 1; kill <= 3; kill++ {
		target := int64(kill * n / 5)
		require.Eventually(t, func() bool { return mock.Stats().Received >= target }, 20*time.Second, time.Millisecond)
		lines := resultLines(t, g, id, true)
		sent := mock.Stats().ByRequestID
		for _, l := range lines {
			if l.Response != nil {
				recorded[l.CustomID] = sent[l.CustomID]
			}
		}
		require.NoError(t, g.cmd.Process.Kill())
		<-g.exited
		t.Logf("kill %d: %d items sent, %d recorded", kill, mock.Stats().Received, len(recorded))
		g = startGovernor(t, env...)
	}
	require.Eventually(t, func() bool { _, st := durableJobState(t, g, id); return st == "completed" },
		30*time.Second, 10*time.Millisecond, "the job resumes by itself and completes")

	lines := resultLines(t, g, id, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	resent := 0
	for i, l := range lines {
		want := fmt.Sprintf("item-%d", i)
		require.Equal(t, want, l.CustomID, "results in input order")
		require.NotNil(t, l.Response, "%s has its answer", want)
		assert.Equal(t, 200, l.Response.StatusCode, want)
		require.Len(t, l.Response.Body.Choices, 1, want)
		assert.Equal(t, fmt.Sprintf("Simulated answer to: item %d", i), l.Response.Body.Choices[0].Message.Content)
		if before, ok := recorded[want]; ok {
			assert.Equal(t, before, counts[want], "%s was recorded before a kill: not sent again", want)
		}
		assert.GreaterOrEqual(t, counts[want], int64(1), want)
		resent += int(counts[want] - 1)
	}
	// Only items in flight at a kill (at most the lane's 8, or the queued
	// window of 16) can have been sent twice.
	assert.LessOrEqual(t, resent, 3*16, "items sent again")
	t.Logf("%d items recorded before a kill, %d sends repeated after one", len(recorded), resent)
}

// SIGTERM while an async job's items are in flight: the job starts no more
// items, the ones in flight finish and are recorded before Governor exits,
// and after a restart on the same directory the job completes without
// sending them again.
func TestSIGTERMLetsJobItemsInFlightFinish(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 1500 * time.Millisecond})
	dir := t.TempDir()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_DRAIN_TIMEOUT=30s"}
	const n = 6

	g := startGovernor(t, env...)
	id := drainWithTwoItemsInFlight(t, g, mock, n)

	g = startGovernor(t, env...)
	require.Eventually(t, func() bool { _, s := durableJobState(t, g, id); return s == "completed" },
		30*time.Second, 10*time.Millisecond, "the job resumes by itself and completes")
	lines := resultLines(t, g, id, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	for i, l := range lines {
		want := fmt.Sprintf("item-%d", i)
		require.Equal(t, want, l.CustomID, "results in input order")
		require.NotNil(t, l.Response, "%s has its answer", want)
		assert.Equal(t, 200, l.Response.StatusCode, want)
		assert.Equal(t, int64(1), counts[want], "%s sent once", want)
	}
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
}

// drainWithTwoItemsInFlight submits an n-item JSONL job that runs two items
// at a time, sends SIGTERM once its first two are at the provider, and
// waits for Governor to exit: those two must have been answered, not cut,
// and no other item started. It returns the job's id.
func drainWithTwoItemsInFlight(t *testing.T, g *governorProcess, mock *mockllm.Server, n int) string {
	t.Helper()
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
	assert.Equal(t, 0, after.InFlight)
	assert.Equal(t, int64(0), after.ClientGone, "the items in flight were not cut")
	assert.Equal(t, int64(2), after.Answered[200], "the items in flight were answered before Governor exited")
	return st.ID
}

// A Governor started on a batch directory whose files were cut at a random
// byte starts, says what it found, and keeps what it can: a job whose
// journal is cut resumes from the records before the cut; a job whose
// input is cut is moved aside and reported lost.
func TestTruncatedBatchDirectory(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 15 * time.Millisecond})
	dir := t.TempDir()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_MAX_CONCURRENCY=4"}
	const n = 200

	g := startGovernor(t, env...)
	cutJournal := submitJob(t, g, durableJob(n))
	cutInput := submitJob(t, g, strings.ReplaceAll(durableJob(n), "item-", "other-"))
	require.Eventually(t, func() bool { return mock.Stats().Received >= n/2 }, 20*time.Second, time.Millisecond)
	require.NoError(t, g.cmd.Process.Kill())
	<-g.exited

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	truncate := func(path string) {
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Positive(t, st.Size())
		cut := rng.Int64N(st.Size())
		t.Logf("seed %d: %s cut from %d to %d bytes", seed, path, st.Size(), cut)
		require.NoError(t, os.Truncate(path, cut))
	}
	truncate(filepath.Join(dir, "jobs", cutJournal, "journal"))
	truncate(filepath.Join(dir, "jobs", cutInput, "input"))
	before := mock.Stats().ByRequestID

	g = startGovernor(t, env...)
	assert.Contains(t, g.logs(), "batch job "+cutInput+" lost: input")
	assert.DirExists(t, filepath.Join(dir, "damaged", cutInput))
	code, _ := durableJobState(t, g, cutInput)
	assert.Equal(t, http.StatusNotFound, code)
	resp, err := oneShot.Get("http://" + g.base + "/governor/batches/" + cutInput)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "was lost: its files were damaged", "the 404 says what happened")

	require.Eventually(t, func() bool { _, st := durableJobState(t, g, cutJournal); return st == "completed" },
		30*time.Second, 10*time.Millisecond)
	lines := resultLines(t, g, cutJournal, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	for i, l := range lines {
		want := fmt.Sprintf("item-%d", i)
		require.Equal(t, want, l.CustomID)
		require.NotNil(t, l.Response, want)
		assert.Equal(t, 200, l.Response.StatusCode, want)
		assert.LessOrEqual(t, counts[want]-before[want], int64(1), "%s: sent at most once more", want)
	}
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
}

// A new Governor started on the batch directory of one still running (a
// rolling update whose old and new pods share a volume) becomes ready at
// once, answers the async job endpoints 503 while the old one holds the
// directory, and, once the old one has drained and exited, takes the
// directory and completes its job: every item answered, none sent twice.
func TestOverlappingGovernorsHandOverTheBatchDirectory(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 300 * time.Millisecond})
	dir := t.TempDir()
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + dir, "GOVERNOR_MAX_CONCURRENCY=2", "GOVERNOR_DRAIN_TIMEOUT=30s"}
	const n = 12

	old := startGovernor(t, env...)
	id := submitJob(t, old, durableJob(n))
	g := startGovernor(t, env...) // ready: startGovernor waits for /readyz
	code, _ := durableJobState(t, g, id)
	assert.Equal(t, http.StatusServiceUnavailable, code, "the old Governor still holds the directory")
	assert.Contains(t, g.logs(), "batch directory in use by another process")
	code, st := durableJobState(t, old, id)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "running", st)

	require.NoError(t, old.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, old.exitCode(t, 30*time.Second))
	require.Eventually(t, func() bool { code, st := durableJobState(t, g, id); return code == 200 && st == "completed" },
		30*time.Second, 10*time.Millisecond, "the new Governor takes the directory and completes the job")
	lines := resultLines(t, g, id, false)
	require.Len(t, lines, n)
	counts := mock.Stats().ByRequestID
	for i, l := range lines {
		want := fmt.Sprintf("item-%d", i)
		require.Equal(t, want, l.CustomID, "results in input order")
		require.NotNil(t, l.Response, want)
		assert.Equal(t, int64(1), counts[want], "%s sent once", want)
	}
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
}
