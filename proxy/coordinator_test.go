package proxy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/mockllm"
)

// fakeCoordinator answers every sync with the same shared state, and
// records what it is told.
type fakeCoordinator struct {
	mu       sync.Mutex
	down     bool
	shared   lane.Shared
	reports  []lane.Report
	reserves int
	left     []string

	// onSync, if set, runs first thing in every sync, without f's lock.
	onSync func()
}

func (f *fakeCoordinator) Sync(ctx context.Context, reports []lane.Report) ([]lane.Shared, error) {
	if f.onSync != nil {
		f.onSync()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("down")
	}
	f.reports = append(f.reports, reports...)
	out := make([]lane.Shared, len(reports))
	for i := range out {
		out[i] = f.shared
	}
	return out, nil
}

func (f *fakeCoordinator) Reserve(ctx context.Context, id string, rate, burst float64) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserves++
	return 0, nil
}

func (f *fakeCoordinator) Up() bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.down }

func (f *fakeCoordinator) Cause() string {
	if f.Up() {
		return ""
	}
	return "refused"
}

func (f *fakeCoordinator) Leave(ctx context.Context, ids []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = append(f.left, ids...)
	return nil
}

func (f *fakeCoordinator) set(fn func(f *fakeCoordinator)) { f.mu.Lock(); fn(f); f.mu.Unlock() }

func (f *fakeCoordinator) get(fn func(f *fakeCoordinator)) { f.mu.Lock(); fn(f); f.mu.Unlock() }

func TestCoordinatedLaneUsesItsShare(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	fc := &fakeCoordinator{shared: lane.Shared{Target: 10.5, Members: 2, Share: 3}}
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Coordinator: fc, SyncInterval: 5 * time.Millisecond}))
	c := client(t)
	resp, _ := chat(t, c, base, map[string]string{"Authorization": "Bearer sk-canary-secret"})
	require.Equal(t, 200, resp.StatusCode)

	var li lane.Info
	require.Eventually(t, func() bool {
		li = lanesOf(t, c, base)[0]
		return li.Coordinated && li.Limit == 3
	}, 2*time.Second, 5*time.Millisecond, "this Governor's limit is its share")
	assert.Equal(t, 10, li.SharedLimit, "the controller holds the shared target")
	require.NotNil(t, redisOf(t, c, base))
	assert.True(t, *redisOf(t, c, base), "GET /governor/lanes says coordination is up")
	assert.Equal(t, 2, li.Members)
	assert.Equal(t, 3, p.lanes.All()[0].Queue().Stats().Limit)

	fc.get(func(f *fakeCoordinator) {
		require.NotEmpty(t, f.reports)
		for _, r := range f.reports {
			assert.Equal(t, li.ID, r.Lane)
			assert.NotContains(t, r.Lane, "sk-canary")
			assert.Equal(t, DefaultMaxConcurrency, r.Max)
		}
	})

	// Redis lost: the lane governs itself from a fair part of the shared
	// limit (10/2 = 5, more than its share of 3).
	fc.set(func(f *fakeCoordinator) { f.down = true })
	require.Eventually(t, func() bool { return !lanesOf(t, c, base)[0].Coordinated }, 2*time.Second, 5*time.Millisecond)
	assert.False(t, *redisOf(t, c, base), "and that it is lost")
	li = lanesOf(t, c, base)[0]
	assert.Equal(t, 5, li.Limit)
	assert.Equal(t, 5, li.SharedLimit)
	assert.Zero(t, li.Members)
	resp, _ = chat(t, c, base, nil)
	assert.Equal(t, 200, resp.StatusCode, "calls go on without the coordinator")

	// Back: the lane rejoins.
	fc.set(func(f *fakeCoordinator) { f.down = false; f.reports = nil })
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].Coordinated }, 2*time.Second, 5*time.Millisecond)
}

func TestCoordinatedPauseAndPacing(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	// Governor's clock moves only when the test says: the pauses below
	// end when the test says, however slow the machine.
	clock := newManualClock()
	fc := &fakeCoordinator{shared: lane.Shared{Target: 8, Members: 1, Share: 8, Rate: 100, Burst: 10}}
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Coordinator: fc, SyncInterval: 5 * time.Millisecond, Now: clock.Now}))
	c := client(t)
	resp, _ := chat(t, c, base, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].Coordinated }, 2*time.Second, 5*time.Millisecond)

	// A shared rate: every dispatch books the shared bucket.
	fc.set(func(f *fakeCoordinator) { f.reserves = 0 })
	for range 3 {
		resp, _ = chat(t, c, base, nil)
		require.Equal(t, 200, resp.StatusCode)
	}
	fc.get(func(f *fakeCoordinator) { assert.Equal(t, 3, f.reserves) })
	syncs := func() (n int) { fc.get(func(f *fakeCoordinator) { n = len(f.reports) }); return n }

	// A pause another Governor was given before this one's last success
	// is over already.
	fc.set(func(f *fakeCoordinator) {
		f.shared.PausedUntil, f.shared.PausedAt = clock.Now().Add(200*time.Millisecond), clock.Now().Add(-time.Second)
		f.reports = nil
	})
	require.Eventually(t, func() bool { return syncs() >= 3 }, 2*time.Second, 5*time.Millisecond, "a few syncs")
	require.Nil(t, lanesOf(t, c, base)[0].PausedUntil)

	// Another Governor's pause holds this one's next call until it ends.
	clock.Advance(time.Second) // the earlier pause is over
	until := clock.Now().Add(300 * time.Millisecond)
	fc.set(func(f *fakeCoordinator) { f.shared.PausedUntil, f.shared.PausedAt = until, clock.Now() })
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].PausedUntil != nil }, 2*time.Second, 5*time.Millisecond)
	done := make(chan int, 1)
	go func() {
		resp, _ := chat(t, c, base, nil)
		done <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].Queued == 1 }, 2*time.Second, 5*time.Millisecond,
		"the call waits in the queue")
	fc.set(func(f *fakeCoordinator) { f.reports = nil })
	require.Eventually(t, func() bool { return syncs() >= 3 }, 2*time.Second, 5*time.Millisecond, "a few syncs")
	select {
	case <-done:
		t.Fatal("the call did not wait for the shared pause")
	default:
	}
	clock.Advance(300 * time.Millisecond)
	assert.Equal(t, 200, <-done, "the pause over, the call goes")
}

func TestCoordinatedDecreaseIsReported(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	fc := &fakeCoordinator{shared: lane.Shared{Target: 8, Members: 1, Share: 8}}
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Coordinator: fc, SyncInterval: 5 * time.Millisecond}))
	c := client(t)
	resp, _ := chat(t, c, base, nil)
	require.Equal(t, 200, resp.StatusCode)
	// Joined, the lane takes the shared target at its next sync: until
	// then, what the first call's success grew it by may still count.
	require.Eventually(t, func() bool {
		l := lanesOf(t, c, base)[0]
		return l.Coordinated && l.Target == 8
	}, 2*time.Second, 5*time.Millisecond, "the lane holds the shared target")

	resp, _ = chat(t, c, base, map[string]string{"X-Request-Id": "d1", mockllm.HeaderFault: "429,ok", mockllm.HeaderRetryAfterMs: "20"})
	require.Equal(t, 200, resp.StatusCode)
	var dec, pause lane.Report
	require.Eventually(t, func() bool {
		fc.get(func(f *fakeCoordinator) {
			for _, r := range f.reports {
				if r.Decreased {
					dec = r
				}
				if !r.PausedUntil.IsZero() {
					pause = r
				}
			}
		})
		return dec.Decreased && !pause.PausedUntil.IsZero()
	}, 2*time.Second, 5*time.Millisecond, "the decrease and the pause are reported")
	assert.Less(t, dec.DecreaseTarget, 8.0)
	assert.True(t, dec.DecreaseDispatched.Before(dec.DecreaseAt), "dispatched %v, decreased %v", dec.DecreaseDispatched, dec.DecreaseAt)
	assert.True(t, pause.PausedAt.Before(pause.PausedUntil))

	// On shutdown the lanes are given back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Shutdown(ctx))
	fc.get(func(f *fakeCoordinator) {
		require.Len(t, f.left, 1)
		assert.True(t, strings.HasPrefix(f.left[0], "default/"))
	})
}

// A Governor with no share (the others use the whole shared limit) sends
// nothing until a sync gives it one, rather than the one call a queue's
// limit of 1 would let out; and it fails open: with the coordinator down
// the call goes.
//
// The hold lasts a grace (a sync interval and a half) past each sync, so
// that a sync that does not come (Redis lost) does not hold the lane. Here
// Governor's clock moves only with the syncs: a sync interval before each
// (but the first, which a new lane asks for at once). So however late a
// loaded machine runs the syncs, each comes one interval after the last in
// Governor's time, and each checks that the hold the last one set is still
// in force.
func TestNoShareHoldsTheLane(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	const interval = 5 * time.Millisecond
	clock := newManualClock()
	var (
		proxy            atomic.Pointer[Proxy]
		syncs, unheld    atomic.Int64
		withoutShareOnly atomic.Bool // the syncs so far all said share 0
	)
	withoutShareOnly.Store(true)
	fc := &fakeCoordinator{shared: lane.Shared{Target: 32, Members: 4, Share: 0}}
	fc.onSync = func() {
		if syncs.Add(1) == 1 {
			return
		}
		clock.Advance(interval)
		if !withoutShareOnly.Load() {
			return
		}
		for _, l := range proxy.Load().lanes.Info(clock.Now()) {
			if l.PausedUntil == nil {
				unheld.Add(1)
			}
		}
	}
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Coordinator: fc, SyncInterval: interval, Now: clock.Now}))
	proxy.Store(p)
	c := client(t)
	done := make(chan int, 1)
	go func() {
		resp, _ := chat(t, c, base, nil)
		done <- resp.StatusCode
	}()
	// (A sync reports a lane: the call's lane exists.)
	require.Eventually(t, func() bool { return syncs.Load() >= 20 }, 5*time.Second, time.Millisecond, "a few syncs")
	select {
	case <-done:
		t.Fatal("a call went with no share")
	default:
	}
	withoutShareOnly.Store(false)
	assert.Zero(t, unheld.Load(), "a sync found the lane no longer held by the last")
	fc.set(func(f *fakeCoordinator) { f.shared.Share = 2 })
	assert.Equal(t, 200, <-done)

	fc.set(func(f *fakeCoordinator) { f.shared.Share = 0 })
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].PausedUntil != nil }, 2*time.Second, 5*time.Millisecond, "held again")
	fc.set(func(f *fakeCoordinator) { f.down = true })
	resp, _ := chat(t, c, base, nil)
	assert.Equal(t, 200, resp.StatusCode, "Redis down: the lane goes on alone")
}

// An evicted lane gives its share back to the other Governors at once, as a
// shutdown does, instead of holding it until its lease expires; the lanes
// that stay are not left.
func TestEvictedLaneLeavesTheCoordinator(t *testing.T) {
	checkLeaks(t)
	_, up := newRecorder(t)
	clock := newManualClock()
	fc := &fakeCoordinator{shared: lane.Shared{Target: 4, Members: 2, Share: 2}}
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxLanes: 1, Metrics: newSet(), Now: clock.Now,
		Coordinator: fc, SyncInterval: 5 * time.Millisecond}))
	c := client(t)

	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-a")))
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	idA := lanes[0].ID
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].Coordinated }, 2*time.Second, 5*time.Millisecond)

	clock.Advance(2*time.Minute + time.Second) // idle past the eviction bound
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-b")))
	lanes = lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	idB := lanes[0].ID
	require.NotEqual(t, idA, idB, "sk-a's lane is evicted")

	var left []string
	require.Eventually(t, func() bool {
		fc.get(func(f *fakeCoordinator) { left = append([]string(nil), f.left...) })
		return len(left) > 0
	}, 2*time.Second, 5*time.Millisecond, "the evicted lane leaves the coordinator")
	assert.Equal(t, []string{idA}, left)
}

// A pause of this Governor's own ends when the shared record holds no pause
// as late (a call succeeded in another Governor since it was asked for): a
// Governor with no call in flight, joining, does not wait out the hint.
func TestOwnPauseEndsOnASuccessElsewhere(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	fc := &fakeCoordinator{shared: lane.Shared{Target: 8, Members: 2, Share: 4, Fair: 4}}
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), Coordinator: fc, SyncInterval: 5 * time.Millisecond}))
	c := client(t)
	resp, _ := chat(t, c, base, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].Coordinated }, 2*time.Second, 5*time.Millisecond)

	now := time.Now()
	until := now.Add(time.Minute)
	// The record keeps the pause in milliseconds, as coord does.
	fc.set(func(f *fakeCoordinator) {
		f.shared.PausedUntil, f.shared.PausedAt = time.UnixMilli(until.UnixMilli()), now
	})
	p.lanes.All()[0].Pause(until, now)
	require.Eventually(t, func() bool {
		sent := false
		fc.get(func(f *fakeCoordinator) {
			for _, r := range f.reports {
				sent = sent || r.PausedUntil.Equal(until)
			}
		})
		return sent
	}, 2*time.Second, 5*time.Millisecond, "the pause is sent")
	fc.set(func(f *fakeCoordinator) { f.reports = nil })
	require.Eventually(t, func() bool {
		n := 0
		fc.get(func(f *fakeCoordinator) { n = len(f.reports) })
		return n >= 3
	}, 2*time.Second, 5*time.Millisecond, "a few syncs")
	require.NotNil(t, lanesOf(t, c, base)[0].PausedUntil, "the record holds the pause: so does the lane")

	fc.set(func(f *fakeCoordinator) { f.shared.PausedUntil = time.Time{} })
	require.Eventually(t, func() bool { return lanesOf(t, c, base)[0].PausedUntil == nil }, 2*time.Second, 5*time.Millisecond,
		"a success elsewhere ended the pause")
	resp, _ = chat(t, c, base, nil)
	assert.Equal(t, 200, resp.StatusCode)
}
