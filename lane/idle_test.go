package lane

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/redistest"
	"github.com/llmgovernor/governor/queue"
)

// countingCoordinator counts the lanes synced (one script each).
type countingCoordinator struct {
	redisCoordinator
	mu    sync.Mutex
	n     int
	lanes map[string]int
}

func (c *countingCoordinator) Sync(ctx context.Context, reports []Report) ([]Shared, error) {
	c.mu.Lock()
	c.n += len(reports)
	for _, r := range reports {
		c.lanes[r.Lane]++
	}
	c.mu.Unlock()
	return c.redisCoordinator.Sync(ctx, reports)
}

func (c *countingCoordinator) take() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, l := c.n, c.lanes
	c.n, c.lanes = 0, map[string]int{}
	return n, l
}

// idleRegistry is a Governor coordinated over srv with the default lease,
// on clock, with no sync loop.
func idleRegistry(t *testing.T, srv *redistest.Server, instance string, clock *fakeClock) (*Registry, *countingCoordinator) {
	t.Helper()
	cc := &countingCoordinator{redisCoordinator: redisCoordinator{redisCoord(t, srv, instance, DefaultLeaseTTL, clock)}, lanes: map[string]int{}}
	return syncedByHand(t, cc, clock), cc
}

// Lanes nobody calls sync once every parkedSync or so, not at every tick;
// their leases hold; the busy Governor of a lane does not wait for the idle
// one's slow syncs to take the slots it gave up; and an idle lane's first
// call syncs it at once.
func TestIdleLanesSyncSlowly(t *testing.T) {
	srv := redistest.Start(t)
	clock := &fakeClock{now: t0}
	ra, ca := idleRegistry(t, srv, "a", clock)
	rb, _ := idleRegistry(t, srv, "b", clock)
	const n = 40
	for i := range n {
		_, err := ra.Get(Key{Upstream: "default", Model: fmt.Sprint("m", i)})
		require.NoError(t, err)
	}
	b, err := rb.Get(Key{Upstream: "default", Model: "m0"})
	require.NoError(t, err)
	step := func(at int) {
		clock.Set(ms(at))
		ra.syncLanes()
		rb.syncLanes()
	}
	for at := 0; at <= 1000; at += 50 {
		step(at)
		if at == 0 {
			require.True(t, b.q.TryAcquire(queue.Priority{}), "b's lane is in use")
		}
	}
	ca.take()

	const ticks = 80 // 4 s, more than the lease
	for k := 1; k <= ticks; k++ {
		step(1000 + 50*k)
		require.Equal(t, 2, b.co.members, "a's idle lane keeps its lease (at %dms)", 1000+50*k)
	}
	scripts, per := ca.take()
	t.Logf("%d idle lanes, %d ticks: %d scripts", n, ticks, scripts)
	parked := func(r *Registry, id string) bool {
		for _, li := range r.Info(clock.Now()) {
			if li.ID == id {
				return li.Parked
			}
		}
		t.Fatalf("no lane %s", id)
		return false
	}
	assert.True(t, parked(ra, fmt.Sprintf("default/m7/%s", b.credHash)), "the lanes API says an idle lane is parked")
	assert.False(t, parked(rb, b.id), "and a lane in use is not")
	assert.Less(t, scripts, n*ticks/8, "idle lanes cost a fraction of a script a tick")
	for i := range n {
		id := fmt.Sprintf("default/m%d/%s", i, b.credHash)
		assert.GreaterOrEqual(t, per[id], 4, "%s syncs at least once a third of the lease", id)
	}

	// b's demand grows: it takes all of the shared limit a sync later, as
	// a Governor alone does, without waiting for a's idle lane to sync.
	at := 1000 + 50*ticks
	target := int(b.co.sharedTarget)
	require.Greater(t, target, 1)
	b.q.SetLimit(64)
	for range target {
		require.True(t, b.q.TryAcquire(queue.Priority{}))
	}
	for _, d := range []int{10, 50} {
		at += d
		clock.Set(ms(at))
		rb.syncLanes()
	}
	assert.Equal(t, int(b.co.sharedTarget), b.co.share, "b's share is the whole limit a sync later, as if it were alone")

	// A call on a's idle lane: it asks for a sync now, and dispatches only
	// once that sync gave it a share.
	a, err := ra.Get(Key{Upstream: "default", Model: "m7"})
	require.NoError(t, err)
	select {
	case <-ra.kick:
	default:
		t.Fatal("the first call on an idle lane asks for no sync")
	}
	assert.False(t, a.q.TryAcquire(queue.Priority{}), "an idle lane dispatches nothing before its sync")
	ca.take()
	ra.syncLanes()
	_, per = ca.take()
	assert.Equal(t, 1, per[a.id], "the idle lane synced at once")
	assert.True(t, a.q.TryAcquire(queue.Priority{}), "and dispatches after it")
	assert.False(t, parked(ra, a.id), "a lane that got a call is no longer parked")
}
