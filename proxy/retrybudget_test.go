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
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/mockllm"
)

// cappedProvider has one slot: the call that finds it free holds it until
// the test releases it, and every other call gets 429 at once, with no
// retry hint. With refuseAll every call gets 429.
type cappedProvider struct {
	mu        sync.Mutex
	changed   *sync.Cond // on every arrival, and when a call ends (see finished)
	holder    string     // the call that holds the slot, "" when free
	release   chan struct{}
	attempts  map[string]int // per X-Request-Id
	refused   map[string]int // per X-Request-Id, since the slot was last taken
	done      map[string]bool
	refuseAll bool
}

func newCappedProvider(t *testing.T, refuseAll bool) (*cappedProvider, string) {
	p := &cappedProvider{release: make(chan struct{}), attempts: map[string]int{}, refused: map[string]int{},
		done: map[string]bool{}, refuseAll: refuseAll}
	p.changed = sync.NewCond(&p.mu)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Request-Id")
		p.mu.Lock()
		p.attempts[id]++
		free := p.holder == "" && !p.refuseAll
		if free {
			p.holder = id
			clear(p.refused)
		} else {
			p.refused[id]++
		}
		p.changed.Broadcast()
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !free {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		<-p.release
		p.mu.Lock()
		p.holder = "" // the slot frees as the call completes
		p.mu.Unlock()
		io.WriteString(w, `{"id":"`+id+`"}`)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// finished records that the call id has its answer.
func (p *cappedProvider) finished(id string) {
	p.mu.Lock()
	p.done[id] = true
	p.changed.Broadcast()
	p.mu.Unlock()
}

// fixedLimit lets n calls of a lane out whatever the provider answers: a
// Phoenix controller whose window never ends and that never collapses.
func fixedLimit(n int) aimd.Config {
	return aimd.Config{Preset: aimd.Phoenix, Max: n, Window: 24 * time.Hour, CollapseThreshold: 1000, CollapseWindow: time.Nanosecond}
}

// Against a provider with one slot, calls that lose the race for it while
// the lane's other calls are served do not spend their retries: each is
// refused more often than its budget allows while another holds the slot,
// and every call still completes, with its attempts counted truthfully.
// Half the calls are proxied, half are batch items (Proxy.Do).
func TestCallsThatLoseTheRaceForACappedSlotComplete(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	const calls, maxRetries = 4, 1
	prov, up := newCappedProvider(t, false)
	px, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), AIMD: fixedLimit(calls)}))
	c := client(t)

	type outcome struct {
		item     bool // run by Proxy.Do, with its execution details
		code     int
		status   string
		attempts int
		errors   []string
	}
	var mu sync.Mutex
	got := map[string]outcome{}
	var wg sync.WaitGroup
	for i := range calls {
		id := fmt.Sprintf("call-%d", i)
		wg.Go(func() {
			var o outcome
			if i%2 == 0 {
				resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": id, HeaderMaxRetries: strconv.Itoa(maxRetries)})
				o.code, o.status = resp.StatusCode, resp.Header.Get(HeaderStatus)
				o.attempts, _ = strconv.Atoi(resp.Header.Get(HeaderAttempts))
			} else {
				res := px.Do(context.Background(), &Call{Path: "/v1/chat/completions", MaxRetries: maxRetries,
					Header: map[string]string{"X-Request-Id": id, "Content-Type": "application/json"},
					Body:   []byte(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)})
				o.item = true
				o.code, o.status, o.attempts, o.errors = res.StatusCode, string(res.Details.Status), res.Details.Attempts, res.Details.Errors
			}
			mu.Lock()
			got[id] = o
			mu.Unlock()
			prov.finished(id)
		})
	}

	// Each round: once a call holds the slot and every other call still
	// running has been refused more times than its budget of retries,
	// release the holder.
	prov.mu.Lock()
	for {
		for !prov.allDoneLocked(calls) && !prov.roundReadyLocked(calls, maxRetries+1) {
			prov.changed.Wait()
		}
		if prov.allDoneLocked(calls) {
			break
		}
		holder := prov.holder
		prov.mu.Unlock()
		prov.release <- struct{}{}
		prov.mu.Lock()
		for !prov.done[holder] {
			prov.changed.Wait()
		}
	}
	prov.mu.Unlock()
	wg.Wait()

	for id, o := range got {
		assert.Equal(t, 200, o.code, "%s: a call that lost races for the slot completes", id)
		assert.Equal(t, prov.attempts[id], o.attempts, "%s: every attempt is counted", id)
		if o.attempts > 1 {
			assert.Equal(t, string(StatusCompletedWithRetries), o.status, id)
		}
	}
	for id, o := range got {
		if o.item {
			assert.Len(t, o.errors, o.attempts-1, "%s: one error per refused attempt", id)
			for _, e := range o.errors {
				assert.Contains(t, e, "429", id)
			}
		}
	}
	total := 0
	for _, n := range prov.attempts {
		total += n
	}
	assert.Greater(t, total, calls*(maxRetries+1), "the calls were refused more often than their budgets allow")
}

// allDoneLocked reports whether all n calls have their answers.
func (p *cappedProvider) allDoneLocked(n int) bool { return len(p.done) == n }

// roundReadyLocked reports whether a call holds the slot and every other
// call still running has been refused at least times since it took it.
func (p *cappedProvider) roundReadyLocked(n, times int) bool {
	if p.holder == "" || p.done[p.holder] {
		return false
	}
	for i := range n {
		id := fmt.Sprintf("call-%d", i)
		if id != p.holder && !p.done[id] && p.refused[id] < times {
			return false
		}
	}
	return true
}

// A provider that refuses every call spends the call's retry budget as
// before: a call alone fails after 1 + its retries attempts, and calls
// sent together all fail too.
func TestAProviderRefusingEverybodySpendsTheBudget(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	const maxRetries = 3
	prov, up := newCappedProvider(t, true)
	px, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), AIMD: fixedLimit(4)}))
	c := client(t)

	resp, body := chat(t, c, base, map[string]string{"X-Request-Id": "alone", HeaderMaxRetries: strconv.Itoa(maxRetries)})
	assert.Equal(t, 429, resp.StatusCode, body)
	assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus))
	assert.Equal(t, strconv.Itoa(maxRetries+1), resp.Header.Get(HeaderAttempts))
	res := px.Do(context.Background(), &Call{Path: "/v1/chat/completions", MaxRetries: maxRetries,
		Header: map[string]string{"X-Request-Id": "item"}, Body: []byte(`{"model":"gpt-test"}`)})
	assert.Equal(t, 429, res.StatusCode)
	assert.Equal(t, StatusFailed, res.Details.Status)
	assert.Equal(t, maxRetries+1, res.Details.Attempts)
	assert.Len(t, res.Details.Errors, maxRetries+1)
	prov.mu.Lock()
	assert.Equal(t, maxRetries+1, prov.attempts["alone"])
	assert.Equal(t, maxRetries+1, prov.attempts["item"])
	prov.mu.Unlock()

	// Together, a call may find out one attempt later that the others
	// were refused too (see retryBudget); none is retried for long.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			id := fmt.Sprintf("together-%d", i)
			resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": id, HeaderMaxRetries: strconv.Itoa(maxRetries)})
			assert.Equal(t, 429, resp.StatusCode, id)
			assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus), id)
			n, _ := strconv.Atoi(resp.Header.Get(HeaderAttempts))
			assert.GreaterOrEqual(t, n, maxRetries+1, id)
			prov.mu.Lock()
			assert.Equal(t, prov.attempts[id], n, "%s: every attempt is counted", id)
			prov.mu.Unlock()
		})
	}
	wg.Wait()
}

// A call does not wait for its turn for ever: past the queue timeout
// from its first 429 that was not charged, its 429s are charged again
// and it fails, although another call holds the provider's slot.
func TestWaitingForATurnEndsAtTheQueueTimeout(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	const maxRetries = 1
	prov, up := newCappedProvider(t, false)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), AIMD: fixedLimit(2), Now: now}))
	c := client(t)

	held := make(chan *http.Response, 1)
	go func() {
		resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": "call-0"})
		held <- resp
	}()
	prov.mu.Lock()
	for prov.holder != "call-0" {
		prov.changed.Wait()
	}
	prov.mu.Unlock()
	waiting := make(chan *http.Response, 1)
	go func() {
		resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": "call-1", HeaderMaxRetries: strconv.Itoa(maxRetries)})
		prov.finished("call-1")
		waiting <- resp
	}()
	prov.mu.Lock()
	for prov.refused["call-1"] < 5 && !prov.done["call-1"] {
		prov.changed.Wait()
	}
	prov.mu.Unlock()
	skew.Store(int64(DefaultQueueTimeout + time.Second))

	resp := <-waiting
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus))
	n, _ := strconv.Atoi(resp.Header.Get(HeaderAttempts))
	prov.mu.Lock()
	assert.Equal(t, prov.attempts["call-1"], n, "every attempt is counted")
	prov.mu.Unlock()
	assert.GreaterOrEqual(t, n, 5+maxRetries, "it waited for its turn first (its fifth 429 may come after the queue timeout)")
	prov.release <- struct{}{}
	assert.Equal(t, 200, (<-held).StatusCode)
}

// Every attempt ends its hold on the lane: answers read whole, streams
// read to their end or cut by their client, batch items. Were one left
// behind, a later 429 would seem to come while another call was in flight
// and would not be charged: the call alone after them is charged each of
// its 429s.
func TestEveryAttemptEndsItsHoldOnTheLane(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	mock, mockURL := startMock(t, mockllm.Config{StreamChunks: 50, ChunkDelay: 2 * time.Millisecond})
	cfg := fastRetries(Config{Upstream: mustURL(t, mockURL)})
	cfg.QueueTimeout = 2 * time.Second // bounds the retries should a hold be left behind
	px, base := startProxy(t, cfg)
	c := client(t)

	resp, _ := chat(t, c, base, nil)
	require.Equal(t, 200, resp.StatusCode)
	res := px.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-test"}`)})
	require.Equal(t, 200, res.StatusCode)
	stream := func() *http.Response {
		resp, err := c.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		return resp
	}
	resp = stream()
	_, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	resp = stream()
	_, err = resp.Body.Read(make([]byte, 1))
	require.NoError(t, err)
	resp.Body.Close() // the client leaves mid-stream
	c.CloseIdleConnections()
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].InFlight == 0 }, 10*time.Second, 5*time.Millisecond)

	const maxRetries = 2
	resp, _ = chat(t, c, base, map[string]string{"X-Request-Id": "alone", "X-Mock-Fault": "429,429,429,429,429",
		HeaderMaxRetries: strconv.Itoa(maxRetries)})
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, strconv.Itoa(maxRetries+1), resp.Header.Get(HeaderAttempts))
	assert.Equal(t, int64(maxRetries+1), mock.Stats().ByRequestID["alone"])
}
