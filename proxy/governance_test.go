package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
)

// A burst far above a provider's hard cap: every call succeeds, and every
// 429 the provider answered was an attempt Governor made, counted in the
// lane (which feeds its controller), and retried. Where the limit settles
// is the controller's, measured by aimd's simulations and govbench's
// matrix.
func TestBurstAgainstHardCapAllSucceed(t *testing.T) {
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{Latency: 20 * time.Millisecond, LatencySpread: 0.2, MaxConcurrency: 4, Seed: 1})
	// The provider's cap answers 429 with retry-after: 1, which pauses the
	// lane; cap that pause so the test stays short.
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxPause: 20 * time.Millisecond}))
	c := client(t)

	const clients, perClient = 50, 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes, attempts := map[int]int{}, 0
	for range clients {
		wg.Go(func() {
			for range perClient {
				resp, _ := chat(t, c, base, nil)
				n, err := strconv.Atoi(resp.Header.Get(HeaderAttempts))
				assert.NoError(t, err, HeaderAttempts)
				mu.Lock()
				codes[resp.StatusCode]++
				attempts += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{200: clients * perClient}, codes, "every call through Governor must succeed")
	st := mock.Stats()
	assert.LessOrEqual(t, st.MaxInFlight, 4)
	assert.Equal(t, int64(clients*perClient), st.Answered[200])
	assert.Positive(t, st.RateLimited, "the burst meets the provider's cap")
	assert.Equal(t, int64(attempts), st.Answered[200]+st.RateLimited, "the provider saw each attempt Governor reported, and no other")
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	assert.Equal(t, uint64(st.RateLimited), lanes[0].RateLimited, "the lane heard every 429")
	t.Logf("429s absorbed: %d for %d calls; final limit %d (target %.2f)", st.RateLimited, clients*perClient, lanes[0].Limit, lanes[0].Target)
}

// recorder is an upstream that records the order in which calls arrive
// (by X-Request-Id) and holds the call with id "block" until released.
type recorder struct {
	mu      sync.Mutex
	ids     []string
	times   []time.Time
	release chan struct{}
	arrived chan string
	answer  func(w http.ResponseWriter, r *http.Request, n int) // optional
}

func newRecorder(t *testing.T) (*recorder, string) {
	rec := &recorder{release: make(chan struct{}), arrived: make(chan string, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Request-Id")
		rec.mu.Lock()
		rec.ids = append(rec.ids, id)
		rec.times = append(rec.times, time.Now())
		n := len(rec.ids)
		rec.mu.Unlock()
		rec.arrived <- id
		if id == "block" {
			<-rec.release
		}
		if rec.answer != nil {
			rec.answer(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"`+id+`"}`)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// limitOne makes every lane's limit 1, so calls queue behind each other.
func limitOne(cfg Config) Config {
	cfg.AIMD = aimd.Config{Max: 1}
	return fastRetries(cfg)
}

func waitQueued(t *testing.T, c *http.Client, base string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		total := 0
		for _, l := range lanesOf(t, c, base) {
			total += l.Queued
		}
		return total == n
	}, 10*time.Second, 5*time.Millisecond, "want %d calls queued", n)
}

func TestUrgentCallsOvertakeBackgroundCalls(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	var wg sync.WaitGroup
	send := func(id, priority string) {
		wg.Go(func() {
			resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": id, "Priority": priority})
			assert.Equal(t, 200, resp.StatusCode, id)
		})
	}
	send("block", "u=3")
	<-rec.arrived
	for i := range 3 {
		send(fmt.Sprintf("bg-%d", i), "u=7")
		waitQueued(t, c, base, i+1)
	}
	send("urgent", "u=0, i")
	waitQueued(t, c, base, 4)
	close(rec.release)
	wg.Wait()
	assert.Equal(t, []string{"block", "urgent", "bg-0", "bg-1", "bg-2"}, rec.seen())
}

func TestClientLeavingQueueIsNeverSentUpstream(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	done := make(chan struct{})
	go func() {
		defer close(done)
		chat(t, c, base, map[string]string{"X-Request-Id": "block"})
	}()
	<-rec.arrived

	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() {
		defer close(left)
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-test"}`))
		req.Header.Set("X-Request-Id", "leaver")
		_, err := c.Do(req)
		assert.Error(t, err)
	}()
	waitQueued(t, c, base, 1)
	cancel()
	<-left
	waitQueued(t, c, base, 0) // Governor noticed and took it out of the queue
	close(rec.release)
	<-done
	chat(t, c, base, map[string]string{"X-Request-Id": "after"})
	assert.Equal(t, []string{"block", "after"}, rec.seen(), "the call whose client left must never reach the provider")
}

func TestRetryAfterPausesTheLane(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	rec.answer = func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "a"})
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus))
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
	rec.mu.Lock()
	gap := rec.times[1].Sub(rec.times[0])
	rec.mu.Unlock()
	assert.GreaterOrEqual(t, gap, time.Second, "the retry waits out the provider's Retry-After")
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	assert.Nil(t, lanes[0].PausedUntil, "the pause is over")
	assert.Equal(t, uint64(1), lanes[0].Decreases+lanes[0].Collapses, "the 429 fed the controller")
	assert.Equal(t, uint64(1), lanes[0].RateLimited, "the 429 is counted")
	assert.Equal(t, uint64(1), lanes[0].Pauses, "its Retry-After paused the lane once")
	assert.NotNil(t, lanes[0].LastDecrease)
	assert.Equal(t, "rate_limited", lanes[0].LastDecreaseReason)
}

func TestFinalAnswersAreNeverRetried(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))
	c := client(t)
	for _, tc := range []struct {
		fault string
		code  int
	}{{"400", 400}, {"401", 401}, {"429-quota", 429}} {
		id := "final-" + tc.fault
		resp, body := chat(t, c, base, map[string]string{"X-Request-Id": id, "X-Mock-Fault": tc.fault + "," + tc.fault})
		assert.Equal(t, tc.code, resp.StatusCode, tc.fault)
		assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus), tc.fault)
		assert.Equal(t, "1", resp.Header.Get(HeaderAttempts), tc.fault)
		assert.Equal(t, "false", resp.Header.Get(HeaderShouldRetry), tc.fault)
		assert.Equal(t, int64(1), mock.Stats().ByRequestID[id], "%s: answered once, never retried", tc.fault)
		if tc.fault == "429-quota" {
			assert.Contains(t, body, "insufficient_quota", "the provider's answer is passed back")
		}
	}
}

func TestRetriesUntilSuccessOrBudget(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	set := newSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Metrics: set}))
	c := client(t)

	resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": "r1", "X-Mock-Fault": "429,529,503"})
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus))
	assert.Equal(t, "4", resp.Header.Get(HeaderAttempts))
	assert.Equal(t, int64(4), mock.Stats().ByRequestID["r1"])
	// The 429 and the 529 are both refusals; the 529 alone says the
	// provider is overloaded.
	li := lanesOf(t, c, base)[0]
	assert.EqualValues(t, 2, li.RateLimited)
	assert.EqualValues(t, 1, li.Overloaded)
	assert.Equal(t, 1.0, counterOf(t, set, fmt.Sprintf("governor_lane_overloaded_total{lane=%q}", li.ID)))

	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "r2", "X-Mock-Fault": "500,500,500", "X-Governor-Max-Retries": "1"})
	assert.Equal(t, 500, resp.StatusCode, "the provider's last answer")
	assert.Contains(t, body, "server_error")
	assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus))
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
	assert.Equal(t, "false", resp.Header.Get(HeaderShouldRetry))
	assert.Equal(t, int64(2), mock.Stats().ByRequestID["r2"])
	assert.Empty(t, mock.Stats().LastHeaders["x-governor-max-retries"], "Governor's own headers stay with Governor")
}

// slowCallInFlight sends a call that takes 3 s (room for a loaded
// machine) and returns once mock is running it; its answer comes on the
// channel.
func slowCallInFlight(t *testing.T, c *http.Client, base string, mock *mockllm.Server) <-chan *http.Response {
	t.Helper()
	slow := make(chan *http.Response, 1)
	go func() {
		resp, _ := chat(t, c, base, map[string]string{"X-Mock-Latency": "3s"})
		slow <- resp
	}()
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 1 }, 10*time.Second, time.Millisecond)
	return slow
}

// Under a concurrency cap a call that completes frees a slot: a success
// ends a Retry-After pause of the lane at once.
func TestASuccessEndsALanePause(t *testing.T) {
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))
	c := client(t)

	// The slow call must still be in flight when the queued call has
	// queued behind the pause.
	slow := slowCallInFlight(t, c, base, mock)
	resp, _ := chat(t, c, base, map[string]string{"X-Mock-Fault": "429", "X-Mock-Retry-After": "30", "X-Governor-Max-Retries": "0"})
	require.Equal(t, 429, resp.StatusCode)
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	require.NotNil(t, lanes[0].PausedUntil, "the 429 paused the lane")

	queued := make(chan *http.Response, 1)
	go func() {
		resp, _ := chat(t, c, base, nil)
		queued <- resp
	}()
	waitQueued(t, c, base, 1)
	assert.Equal(t, 200, (<-slow).StatusCode)
	resp = <-queued
	assert.Equal(t, 200, resp.StatusCode)
	ms, err := strconv.Atoi(resp.Header.Get(HeaderQueueMs))
	require.NoError(t, err)
	assert.Less(t, ms, 10_000, "dispatched when the slow call succeeded, not 30s later")
	assert.Nil(t, lanesOf(t, c, base)[0].PausedUntil, "the pause is over")
}

// A call answered 429 waits out its Retry-After only while nothing of its
// lane succeeds: under a concurrency cap the success freed a slot, and the
// retry takes it ahead of fresh calls.
func TestASuccessEndsTheWaitOfARateLimitedCall(t *testing.T) {
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL)}))
	c := client(t)

	// The slow call must still be in flight when the other call has been
	// answered 429.
	slow := slowCallInFlight(t, c, base, mock)
	start := time.Now()
	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "told-to-wait", "X-Mock-Fault": "429", "X-Mock-Retry-After": "30"})
	took := time.Since(start)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus))
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
	assert.Equal(t, 200, (<-slow).StatusCode)
	assert.Less(t, took, 20*time.Second, "retried when the slow call succeeded, not 30 s after its 429")
	assert.Equal(t, int64(2), mock.Stats().ByRequestID["told-to-wait"])
}

func TestAPIKeysGetIndependentLanes(t *testing.T) {
	checkLeaks(t)
	const canary = "sk-canary-0123456789abcdef"
	mock, mockURL := startMock(t, mockllm.Config{})
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Metrics: set}))
	c := client(t)

	// Key A is told to wait 30s; with no retries left it gets the 429 back,
	// and its lane stays paused.
	resp, _ := chat(t, c, base, map[string]string{"Authorization": "Bearer " + canary, "X-Mock-Fault": "429",
		"X-Mock-Retry-After": "30", "X-Governor-Max-Retries": "0"})
	assert.Equal(t, 429, resp.StatusCode)
	// Key B is not slowed by A's pause.
	resp, _ = chat(t, c, base, map[string]string{"Authorization": "Bearer sk-other"})
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "0", resp.Header.Get(HeaderQueueMs))
	_ = mock

	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 2)
	assert.NotEqual(t, lanes[0].Credential, lanes[1].Credential)
	assert.NotNil(t, lanes[0].PausedUntil, "key A's lane is paused")
	assert.Nil(t, lanes[1].PausedUntil, "key B's lane is not")

	// The key shows nowhere: lanes, metrics.
	rawLanes, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	b, _ := io.ReadAll(rawLanes.Body)
	rawLanes.Body.Close()
	assert.NotContains(t, string(b), canary)
	var sb strings.Builder
	set.WritePrometheus(&sb)
	assert.NotContains(t, sb.String(), canary)
	assert.NotContains(t, sb.String(), canary[3:15])
	assert.Contains(t, sb.String(), `governor_lane_pauses_total{lane="`+lanes[0].ID+`"} 1`)
}

func TestQueueFullAnswers503(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := newSet()
	cfg := limitOne(Config{Upstream: mustURL(t, up), Metrics: set})
	cfg.QueueCapacity = 1
	_, base := startProxy(t, cfg)
	c := client(t)
	var wg sync.WaitGroup
	wg.Go(func() { chat(t, c, base, map[string]string{"X-Request-Id": "block"}) })
	<-rec.arrived
	wg.Go(func() { chat(t, c, base, map[string]string{"X-Request-Id": "waiting"}) })
	waitQueued(t, c, base, 1)
	li := lanesOf(t, c, base)[0]
	assert.Equal(t, lane.LimitedByLimit, li.LimitedBy, "the call waits because the one in flight fills the limit")
	assert.Equal(t, 1, li.QueueCapacity)
	assert.Nil(t, redisOf(t, c, base), "no Redis configured: no redis status")
	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "rejected"})
	assert.Equal(t, 503, resp.StatusCode)
	assert.Contains(t, body, CodeQueueFull)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.True(t, ra >= 1 && ra <= 60)
	assert.Equal(t, 1.0, counterOf(t, set, `governor_errors_total{code="queue_full"}`))
	assert.Equal(t, 1.0, counterOf(t, set, `governor_lane_refused_total{lane="`+li.ID+`",code="queue_full"}`), "the lane whose queue is full")
	assert.Equal(t, map[string]uint64{"queue_full": 1, "queue_timeout": 0}, lanesOf(t, c, base)[0].Refused)
	close(rec.release)
	wg.Wait()
	assert.Equal(t, []string{"block", "waiting"}, rec.seen())
}

func TestQueueTimeoutAnswers504(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := newSet()
	cfg := limitOne(Config{Upstream: mustURL(t, up), Metrics: set})
	cfg.QueueTimeout = 50 * time.Millisecond
	_, base := startProxy(t, cfg)
	c := client(t)
	var wg sync.WaitGroup
	wg.Go(func() { chat(t, c, base, map[string]string{"X-Request-Id": "block"}) })
	<-rec.arrived
	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "late"})
	assert.Equal(t, 504, resp.StatusCode)
	assert.Contains(t, body, CodeQueueTimeout)
	li := lanesOf(t, c, base)[0]
	assert.Equal(t, 1.0, counterOf(t, set, `governor_lane_refused_total{lane="`+li.ID+`",code="queue_timeout"}`))
	close(rec.release)
	wg.Wait()
	assert.Equal(t, []string{"block"}, rec.seen())
}

// A Priority field sent on two lines is one field, its lines joined by
// commas, whose last urgency counts (RFC 9110 §5.3, RFC 9651 §3.2): a
// gateway that appends `u=7` to a client's `u=0` (as Envoy's
// request_headers_to_add does by default) gets its call queued as
// background, behind a call of the default urgency.
func TestPriorityOnSeveralLinesIsOneField(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	var wg sync.WaitGroup
	send := func(id string, priority ...string) {
		wg.Go(func() {
			req, err := http.NewRequest("POST", base+"/v1/chat/completions",
				strings.NewReader(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`))
			if !assert.NoError(t, err) {
				return
			}
			req.Header.Set("X-Request-Id", id)
			req.Header["Priority"] = priority
			resp, err := c.Do(req)
			if assert.NoError(t, err, id) {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				assert.Equal(t, 200, resp.StatusCode, id)
			}
		})
	}
	send("block")
	<-rec.arrived
	send("appended", "u=0", "u=7")
	waitQueued(t, c, base, 1)
	send("invalid", "u=0", "u=?")
	waitQueued(t, c, base, 2)
	send("default")
	waitQueued(t, c, base, 3)
	send("urgent", "i", "u=1")
	waitQueued(t, c, base, 4)
	close(rec.release)
	wg.Wait()
	// invalid: one line does not parse, so the field as a whole is
	// ignored (RFC 9651): the default urgency, ahead of "default" (sent
	// later).
	assert.Equal(t, []string{"block", "urgent", "invalid", "default", "appended"}, rec.seen())
}
