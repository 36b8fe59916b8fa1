package lane

import (
	"context"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/coord"
	"github.com/llmgovernor/governor/internal/redistest"
)

// redisCoordinator is a Coordinator over package coord, as cmd/governor
// wires it (the report and state types convert field for field).
type redisCoordinator struct{ c *coord.Coordinator }

func (a redisCoordinator) Sync(ctx context.Context, reports []Report) ([]Shared, error) {
	in := make([]coord.Report, len(reports))
	for i, r := range reports {
		in[i] = coord.Report(r)
	}
	out, err := a.c.Sync(ctx, in)
	if err != nil {
		return nil, err
	}
	shared := make([]Shared, len(out))
	for i, s := range out {
		shared[i] = Shared(s)
	}
	return shared, nil
}

func (a redisCoordinator) Reserve(ctx context.Context, id string, rate, burst float64) (time.Duration, error) {
	return a.c.Reserve(ctx, id, rate, burst)
}

func (a redisCoordinator) Up() bool { return a.c.Up() }

func (a redisCoordinator) Cause() string { return string(a.c.Cause()) }

func (a redisCoordinator) Leave(ctx context.Context, ids []string) error { return a.c.Leave(ctx, ids) }

// redisCoord is a Coordinator of the Governor named instance over srv,
// with lease, on clock.
func redisCoord(t *testing.T, srv *redistest.Server, instance string, lease time.Duration, clock *fakeClock) *coord.Coordinator {
	t.Helper()
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	co, err := coord.New(coord.Config{Options: opts, Instance: instance, Timeout: time.Second,
		SyncInterval: testInterval, LeaseTTL: lease, Now: clock.Now, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = co.Close() })
	return co
}

// syncedByHand is a Registry coordinated by co, on clock, with no sync
// loop: the test syncs it at the instants it chooses.
func syncedByHand(t *testing.T, co Coordinator, clock *fakeClock) *Registry {
	t.Helper()
	r, err := newRegistry(Config{AIMD: aimd.Config{Max: 64}, Coordinator: co, SyncInterval: testInterval,
		Now: clock.Now, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// redisLane is a lane of a Governor coordinated over srv, on clock, with no
// sync loop: the test syncs its Registry at the instants it chooses.
func redisLane(t *testing.T, srv *redistest.Server, instance string, clock *fakeClock) (*Registry, *Lane) {
	t.Helper()
	co := redisCoord(t, srv, instance, time.Minute, clock)
	require.True(t, co.Up())
	r := syncedByHand(t, redisCoordinator{co}, clock)
	l, err := r.Get(Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return r, l
}

// Through a real Redis, which keeps instants to the millisecond: a
// Governor's own decrease keeps its instant (re-dated to the sync, it
// would hold the lane's growth longer than the controller meant), and the
// other Governor takes it as another's, dated at its sync.
func TestOwnDecreaseKeepsItsInstantOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	clock := &fakeClock{now: t0}
	ra, a := redisLane(t, srv, "a", clock)
	rb, b := redisLane(t, srv, "b", clock)
	for _, at := range []int{0, 50} {
		clock.Set(ms(at))
		ra.syncLanes()
		rb.syncLanes()
	}
	require.True(t, a.co.joined)
	require.True(t, b.co.joined)

	at := ms(100).Add(300 * time.Microsecond) // within a millisecond
	clock.Set(at)
	b.Observe(RateLimited, time.Millisecond, at, at)
	require.EqualValues(t, 1, b.ctrl.State().Decreases)
	require.Equal(t, at, b.ctrl.State().LastDecrease)

	clock.Set(ms(150))
	rb.syncLanes()
	assert.Equal(t, at, b.ctrl.State().LastDecrease, "b's own decrease keeps its instant")
	assert.Zero(t, b.m.byCause[CauseOtherGovernor].Get())

	clock.Set(ms(160))
	ra.syncLanes()
	assert.Equal(t, ms(160), a.ctrl.State().LastDecrease, "a takes b's decrease at its sync")

	clock.Set(ms(200))
	rb.syncLanes()
	assert.Equal(t, at, b.ctrl.State().LastDecrease, "and b's stays its own at the next sync")
}
