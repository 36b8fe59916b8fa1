package batch_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

// gate is a provider that holds every request until the test lets it
// answer, and reports the X-Request-Id of each request as it arrives: with
// one call at a time in the lane, the order of arrival is the order in
// which the lane's queue let the calls out.
type gate struct {
	url     string
	arrived chan string
	release chan struct{}
}

func newGate(t *testing.T) *gate {
	g := &gate{arrived: make(chan string), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case g.arrived <- r.Header.Get("X-Request-Id"):
		case <-r.Context().Done():
			return
		}
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// next lets the call in flight answer and returns the id of the call the
// lane lets out after it.
func (g *gate) next(t *testing.T) string {
	t.Helper()
	select {
	case g.release <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no call in flight to release")
	}
	select {
	case id := <-g.arrived:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no call came next")
		return ""
	}
}

// queued is the number of calls waiting in the lanes.
func (e *env) queued(t *testing.T) int {
	t.Helper()
	resp, err := e.c.Get(e.base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []lane.Info }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	n := 0
	for _, l := range out.Lanes {
		n += l.Queued
	}
	return n
}

// queuedAt is the number of calls of urgency u waiting in the lanes.
func (e *env) queuedAt(t *testing.T, u int) int {
	t.Helper()
	resp, err := e.c.Get(e.base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []lane.Info }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	n := 0
	for _, l := range out.Lanes {
		n += l.QueuedByUrgency[fmt.Sprintf("u=%d", u)]
	}
	return n
}

func (e *env) waitQueued(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return e.queued(t) == n }, 10*time.Second, time.Millisecond, "%d calls waiting", n)
}

// tenantJob is n chat items whose X-Request-Id is prefix-i.
func tenantJob(prefix string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"url":"/v1/chat/completions","headers":{"X-Request-Id":"%s-%d"},"body":{"model":"gpt-test","messages":[{"role":"user","content":"%d"}]}}`, prefix, i, i)
	}
	return `{"requests":[` + strings.Join(items, ",") + `]}`
}

// Two async jobs of two tenants (neither names one: each job is a tenant
// of its own) and an interactive call share a lane that takes one call at
// a time. The interactive call (urgency 3) goes first; then the jobs take
// turns, so a job of 10 items submitted after one of 1,000 is done after
// 20 calls, not after 1,000.
func TestJobsOfTwoTenantsTakeTurnsInALane(t *testing.T) {
	g := newGate(t)
	idle, _, stopIdle, err := mockllm.Start(mockllm.Config{})
	require.NoError(t, err)
	t.Cleanup(stopIdle)
	const window, big, small = 16, 1000, 10
	e := newEnv(t, envOptions{upstream: idle, mockURL: g.url, // the gate is the provider
		proxy: func(c *proxy.Config) { c.AIMD.Max = 1 },
		batch: func(c *batch.Config) { c.Window = window }})

	bigJob := e.createJob(t, tenantJob("big", big))
	first := <-g.arrived
	require.True(t, strings.HasPrefix(first, "big-"), first)
	e.waitQueued(t, window-1)
	smallJob := e.createJob(t, tenantJob("small", small))
	e.waitQueued(t, window-1+small)
	interactive := make(chan int, 1)
	go func() {
		resp, _ := e.post(t, "/v1/chat/completions", "application/json",
			`{"model":"gpt-test","messages":[{"role":"user","content":"now"}]}`, "X-Request-Id", "interactive")
		interactive <- resp.StatusCode
	}()
	e.waitQueued(t, window+small)

	var order []string
	for range 1 + 2*small - 1 {
		id, _, _ := strings.Cut(g.next(t), "-")
		order = append(order, id)
	}
	want := []string{"interactive"}
	for i := range small {
		if i > 0 {
			want = append(want, "big")
		}
		want = append(want, "small")
	}
	assert.Equal(t, want, order, "the interactive call first, then the jobs in turns")
	assert.Equal(t, http.StatusOK, <-interactive)

	next := g.next(t) // the last small item answers
	assert.True(t, strings.HasPrefix(next, "big-"), next)
	st := e.waitJob(t, smallJob.ID)
	assert.Equal(t, small, st.Counts["COMPLETED"], "%v", st.Counts)
	// Its 10th item answered with the small job's last one; the 11th is
	// held in flight.
	require.Eventually(t, func() bool { return e.jobStatus(t, bigJob.ID).Counts["COMPLETED"] == small }, 10*time.Second,
		time.Millisecond, "the large job made as much progress meanwhile")
	assert.Equal(t, batch.JobRunning, e.jobStatus(t, bigJob.ID).Status)
	resp, out := e.do(t, http.MethodDelete, batch.PathBatches+"/"+bigJob.ID, "", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
}

// A batch holding more items at once than its lane's queue has room for
// (its window, or other traffic filling the queue) waits for room: every
// item completes, none fails with queue_full, and each reached the
// provider once. Sync and async alike.
func TestItemsWaitForRoomInAFullQueue(t *testing.T) {
	const n = 24
	e := newEnv(t, envOptions{mock: mockllm.Config{Latency: 5 * time.Millisecond},
		proxy: func(c *proxy.Config) { c.AIMD.Max = 1; c.QueueCapacity = 2 },
		batch: func(c *batch.Config) { c.Window = 16 }})
	items := make([]any, n)
	for i := range items {
		items[i] = chatItem("", fmt.Sprint(i), map[string]string{"X-Request-Id": fmt.Sprintf("room-%d", i)})
	}
	body := mustJSON(t, map[string]any{"requests": items, "max_retries": 0})

	st := e.waitJob(t, e.createJob(t, body).ID)
	assert.Equal(t, n, st.Counts["COMPLETED"], "%v", st.Counts)
	doc := e.runBatch(t, body)
	assert.Equal(t, n, doc.Summary.Completed, "%+v", doc.Summary)
	for i, d := range doc.Details {
		assert.Equal(t, 1, d.Attempts, "item %d", i)
	}
	sent := e.mock.Stats().ByRequestID
	for i := range n {
		assert.Equal(t, int64(2), sent[fmt.Sprintf("room-%d", i)], "item %d: once per batch", i)
	}
	assert.Zero(t, e.counter(t, `governor_errors_total{code="queue_full"}`), "no call was answered queue_full")
}

// An interactive call that finds its lane's queue full of batch items
// takes the place of one of them: it is not refused, it goes next, and the
// item turned away waits for room again, so the job still completes.
func TestInteractiveCallTakesTheQueuePlaceOfABatchItem(t *testing.T) {
	g := newGate(t)
	idle, _, stopIdle, err := mockllm.Start(mockllm.Config{})
	require.NoError(t, err)
	t.Cleanup(stopIdle)
	const n = 12
	e := newEnv(t, envOptions{upstream: idle, mockURL: g.url, // the gate is the provider
		proxy: func(c *proxy.Config) { c.AIMD.Max = 1; c.QueueCapacity = 2 },
		batch: func(c *batch.Config) { c.Window = 8 }})

	job := e.createJob(t, tenantJob("job", n))
	first := <-g.arrived
	require.True(t, strings.HasPrefix(first, "job-"), first)
	e.waitQueued(t, 2) // full: the job's items hold both places
	interactive := make(chan *http.Response, 1)
	go func() {
		resp, _ := e.post(t, "/v1/chat/completions", "application/json",
			`{"model":"gpt-test","messages":[{"role":"user","content":"now"}]}`, "X-Request-Id", "interactive")
		interactive <- resp
	}()
	require.Eventually(t, func() bool { return e.queuedAt(t, 3) == 1 && e.queuedAt(t, 5) == 1 }, 10*time.Second, time.Millisecond,
		"the interactive call waits in the place of an item")
	assert.Equal(t, "interactive", g.next(t), "the interactive call goes next")
	for range n - 1 {
		id := g.next(t)
		assert.True(t, strings.HasPrefix(id, "job-"), id)
	}
	resp := <-interactive
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	g.release <- struct{}{} // the last item
	st := e.waitJob(t, job.ID)
	assert.Equal(t, n, st.Counts["COMPLETED"], "%v", st.Counts)
}

// Items whose credentials need more lanes than the bound allows
// (GOVERNOR_MAX_LANES, 2 here; a batch whose items carry their end users'
// own keys) wait for a lane to make room, as they wait for room in a full
// queue: once the lanes of the first items have been unused for two
// minutes, the others take their places and are answered, each sent once.
// No call was answered too_many_lanes, so none is counted.
func TestItemsWaitForALaneToMakeRoom(t *testing.T) {
	var skew atomic.Int64 // how far the proxy's clock is ahead
	e := newEnv(t, envOptions{mock: mockllm.Config{Latency: 5 * time.Millisecond},
		proxy: func(c *proxy.Config) {
			c.MaxLanes = 2
			c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		}})
	const n = 4
	items := make([]any, n)
	for i := range items {
		items[i] = chatItem("", fmt.Sprint(i), map[string]string{"Authorization": fmt.Sprintf("Bearer sk-user-%d", i), "X-Request-Id": fmt.Sprintf("key-%d", i)})
	}
	body := mustJSON(t, map[string]any{"requests": items, "max_retries": 0})
	done := make(chan batch.Document, 1)
	go func() { done <- e.runBatch(t, body) }()

	// Two items get the two lanes and are answered; the other two find
	// no lane to be had. Then the two lanes' last use is two minutes past.
	require.Eventually(t, func() bool { return e.mock.Stats().Received == 2 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		resp, out := e.do(t, http.MethodGet, "/governor/lanes", "", "")
		var v struct{ Lanes []lane.Info }
		require.Equal(t, http.StatusOK, resp.StatusCode, out)
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		busy := 0
		for _, l := range v.Lanes {
			busy += l.InFlight + l.Queued
		}
		return len(v.Lanes) == 2 && busy == 0
	}, 10*time.Second, time.Millisecond)
	select {
	case doc := <-done:
		t.Fatalf("the batch ended before a lane could make room: %+v", doc.Summary)
	default:
	}
	skew.Store(int64(3 * time.Minute))

	doc := <-done
	assert.Equal(t, n, doc.Summary.Completed, "%+v", doc.Summary)
	for i, d := range doc.Details {
		assert.Equal(t, 1, d.Attempts, "item %d: %+v", i, d)
	}
	sent := e.mock.Stats().ByRequestID
	for i := range n {
		assert.Equal(t, int64(1), sent[fmt.Sprintf("key-%d", i)], "item %d: sent once", i)
	}
	assert.Zero(t, e.counter(t, `governor_errors_total{code="too_many_lanes"}`), "no call was answered too_many_lanes")
}
