package batch_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/internal/logtest"
	"github.com/llmgovernor/governor/mockllm"
)

// lostMsg is the warning for a job held in memory whose results go with
// the process.
const lostMsg = "batch job results lost at shutdown: kept in memory only, and not read to their end (set Config.Dir to keep jobs across restarts)"

// An async job held in memory (no batch directory) when Governor shuts
// down starts no more items, lets those in flight finish within the
// drain, and ends with every row: the answers of the items that finished,
// DID_NOT_RUN for the others, stopped "shutdown". Its results go with the
// process, so the log says which items did not run.
func TestMemoryJobFinishesItsItemsInFlightAtShutdown(t *testing.T) {
	var logs logtest.Buffer
	e := newEnv(t, envOptions{batch: func(c *batch.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	}})
	st := e.createJSONLJob(t, jsonlJob(6, "300ms"))
	require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 2 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.batches.Shutdown(ctx), "the items in flight finish within the drain")

	ms := e.mock.Stats()
	assert.Equal(t, int64(2), ms.Received, "no item started after Shutdown")
	assert.Equal(t, int64(0), ms.ClientGone, "the items in flight were not cut")
	assert.Equal(t, int64(2), ms.Answered[200])

	st = e.jobStatus(t, st.ID)
	assert.Equal(t, batch.JobCompleted, st.Status)
	assert.Equal(t, "shutdown", st.Stopped)
	assert.Equal(t, map[string]int{"COMPLETED": 2, "DID_NOT_RUN": 4}, nonZero(st.Counts))
	_, lines := e.jsonlResults(t, st.ID, false)
	require.Len(t, lines, 6)
	for i, l := range lines {
		if i < 2 {
			assert.NotNil(t, l["response"], "item %d answered", i)
			continue
		}
		assert.Nil(t, l["response"], "item %d", i)
		assert.Equal(t, "did_not_run", l["error"].(map[string]any)["code"], "item %d", i)
	}

	lost := logs.Lines(t, lostMsg)
	require.Len(t, lost, 1)
	assert.Equal(t, st.ID, lost[0]["batch"])
	assert.EqualValues(t, 2, lost[0]["completed"])
	assert.EqualValues(t, 4, lost[0]["did_not_run"])
	assert.Equal(t, []any{"r2", "r3", "r4", "r5"}, lost[0]["not_run"])
}

// Items of a job held in memory still in flight when Shutdown's ctx ends
// are cut: DID_NOT_RUN, their details keeping the attempt and saying it
// was cut by the shutdown.
func TestMemoryJobItemsCutAtTheDrainsEnd(t *testing.T) {
	e := newEnv(t, envOptions{})
	st := e.createJSONLJob(t, jsonlJob(4, "1h"))
	require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 2 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, e.batches.Shutdown(ctx), context.DeadlineExceeded)
	require.Eventually(t, func() bool { return e.mock.Stats().ClientGone == 2 }, 10*time.Second, time.Millisecond,
		"the items in flight are cut at the deadline")

	st = e.jobStatus(t, st.ID)
	assert.Equal(t, batch.JobCompleted, st.Status, "the job has ended: Shutdown waited for its last rows")
	assert.Equal(t, "shutdown", st.Stopped)
	assert.Equal(t, map[string]int{"DID_NOT_RUN": 4}, nonZero(st.Counts))
	resp, out := e.do(t, "GET", batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, 200, resp.StatusCode, out)
	assert.Contains(t, out, `"error":{"code":"did_not_run"`)
	assert.Equal(t, int64(2), e.mock.Stats().Received, "no item started after Shutdown")
}

// A job DELETEd while Governor drains ends cancelled, its items in flight
// cut; kept in a batch directory, it stays cancelled after a restart and
// sends nothing more.
func TestJobCancelledDuringTheDrainStaysCancelled(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "batch directory"}[durable], func(t *testing.T) {
			mock, mockURL, stopMock, err := mockllm.Start(mockllm.Config{})
			require.NoError(t, err)
			t.Cleanup(stopMock)
			dir := t.TempDir()
			var logs logtest.Buffer
			opts := envOptions{upstream: mock, mockURL: mockURL, batch: func(c *batch.Config) {
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				if durable {
					c.Dir = dir
				}
			}}
			e := newEnv(t, opts)
			st := e.createJSONLJob(t, jsonlJob(6, "1h"))
			require.Eventually(t, func() bool { return mock.Stats().InFlight == 2 }, 10*time.Second, time.Millisecond)

			drained := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				drained <- e.batches.Shutdown(ctx)
			}()
			// The drain waits for the items in flight; the job is
			// cancelled meanwhile.
			require.Eventually(t, func() bool {
				resp, _ := e.do(t, "DELETE", batch.PathBatches+"/"+st.ID, "", "")
				return resp.StatusCode == 202
			}, 10*time.Second, time.Millisecond)
			require.NoError(t, <-drained, "the cancel ends the drain's wait")
			require.Eventually(t, func() bool { return mock.Stats().ClientGone == 2 }, 10*time.Second, time.Millisecond,
				"the items in flight are cut")
			st = e.jobStatus(t, st.ID)
			assert.Equal(t, batch.JobCancelled, st.Status)
			assert.Equal(t, "cancelled", st.Stopped)
			assert.Equal(t, map[string]int{"DID_NOT_RUN": 6}, nonZero(st.Counts))
			if !durable {
				assert.Empty(t, logs.Lines(t, lostMsg), "a job its client deleted is not reported lost")
				return
			}
			e.stop()
			e2 := newEnv(t, opts)
			st = e2.waitJob(t, st.ID)
			assert.Equal(t, batch.JobCancelled, st.Status, "never resumed")
			assert.Equal(t, map[string]int{"DID_NOT_RUN": 6}, nonZero(st.Counts))
			assert.Equal(t, int64(2), mock.Stats().Received, "nothing more sent")
		})
	}
}

// A job submitted once Governor has begun to shut down is refused with
// 503 draining and Retry-After, rather than accepted and ended at once
// with nothing run (its results, held in memory, gone with the process).
func TestJobSubmittedDuringTheDrainIsRefused(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "batch directory"}[durable], func(t *testing.T) {
			opts := envOptions{}
			if durable {
				dir := t.TempDir()
				opts.batch = func(c *batch.Config) { c.Dir = dir }
			}
			e := newEnv(t, opts)
			e.createJSONLJob(t, jsonlJob(1, "300ms"))
			require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 1 }, 10*time.Second, time.Millisecond)
			// The drain begins (Shutdown pauses the jobs first, as
			// Pause does), then waits for the item in flight.
			e.batches.Pause()
			drained := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				drained <- e.batches.Shutdown(ctx)
			}()
			resp, out := e.post(t, batch.PathBatches, "application/jsonl", jsonlJob(2, "0s"))
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, out)
			assert.Contains(t, out, `"code":"draining"`)
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
			require.NoError(t, <-drained)
			jobs, _ := e.listed(t)
			assert.Len(t, jobs, 1, "only the first job is held")
			assert.Equal(t, int64(1), e.mock.Stats().Received)
		})
	}
}

// AwaitRead, the first step of a drain, counts and waits for the jobs held
// in memory whose results nobody is done with: a finished job whose
// results are unread and a running one. Reading the first to its end and
// deleting the second ends the wait; a job whose results are never read
// holds it until its context ends. With a batch directory nothing is
// waited for: the results stay on disk.
func TestAwaitReadWaitsForUnreadMemoryJobs(t *testing.T) {
	e := newEnv(t, envOptions{})
	done := e.createJSONLJob(t, jsonlJob(1, "0s"))
	e.waitJob(t, done.ID)
	running := e.createJSONLJob(t, jsonlJob(1, "5s"))
	require.Eventually(t, func() bool { return e.mock.Stats().InFlight == 1 }, 10*time.Second, time.Millisecond)

	assert.Equal(t, 2, e.batches.Pause())
	awaited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		awaited <- e.batches.AwaitRead(ctx)
	}()
	_, lines := e.jsonlResults(t, done.ID, false)
	require.Len(t, lines, 1)
	assert.Equal(t, 1, e.batches.Pause(), "the read job is done with")
	resp, out := e.do(t, http.MethodDelete, batch.PathBatches+"/"+running.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	require.NoError(t, <-awaited, "reading one and deleting the other ends the wait")
	assert.Zero(t, e.batches.Pause())

}

// A shutdown waits only for the jobs a client still follows: submitted,
// or asked about, within a minute before it. A finished job nobody asked
// about for longer does not hold the drain; asked about again, it does.
func TestPauseCountsOnlyJobsFollowedLately(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{batch: func(c *batch.Config) { c.Now = clock }})
	left := e.createJSONLJob(t, jsonlJob(1, "0s"))
	e.waitJob(t, left.ID)
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	followed := e.createJSONLJob(t, jsonlJob(1, "0s"))
	e.waitJob(t, followed.ID)

	assert.Equal(t, 1, e.batches.Pause(), "the job asked about 2 minutes ago is not waited for")
	e.jobStatus(t, left.ID)
	assert.Equal(t, 2, e.batches.Pause(), "asked about again, it is")
	for _, id := range []string{left.ID, followed.ID} {
		_, lines := e.jsonlResults(t, id, false)
		require.Len(t, lines, 1)
	}
	assert.Zero(t, e.batches.Pause())
}

// A job whose results nobody reads holds AwaitRead until its context
// ends; with a batch directory, where results outlive the process, there
// is nothing to wait for.
func TestAwaitReadEndsWithItsContext(t *testing.T) {
	for _, durable := range []bool{false, true} {
		opts := envOptions{}
		if durable {
			dir := t.TempDir()
			opts.batch = func(c *batch.Config) { c.Dir = dir }
		}
		e := newEnv(t, opts)
		st := e.createJSONLJob(t, jsonlJob(1, "0s"))
		e.waitJob(t, st.ID)
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		if durable {
			assert.Zero(t, e.batches.Pause())
			assert.NoError(t, e.batches.AwaitRead(ended))
		} else {
			assert.Equal(t, 1, e.batches.Pause())
			assert.ErrorIs(t, e.batches.AwaitRead(ended), context.Canceled)
		}
	}
}
