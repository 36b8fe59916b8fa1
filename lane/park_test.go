package lane

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/internal/redistest"
	"github.com/llmgovernor/governor/queue"
)

// A parked lane's next call goes out only once the sync that call asks for
// has given the lane a share, however late that sync lands (a sync loop
// held up by a slow Redis or a loaded machine): no call at a limit of 1
// meanwhile. A sync that fails instead lets it out at once, governed
// locally. The lane runs in a synctest bubble: the queue's timers end on
// its clock, which moves only when every goroutine of the test is blocked.
func TestWakingLaneWaitsForItsSync(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fails: the sync fails; othersLate: it lands, but the other
		// Governor has not synced since the slots were given up, so
		// it gives no share until the next.
		fails, othersLate bool
	}{{"the sync lands", false, false}, {"the sync lands, the other Governor's later", false, true}, {"the sync fails", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := newRegistry(Config{AIMD: aimd.Config{Max: 64}, Coordinator: &fakeCoordinator{},
					SyncInterval: testInterval, Metrics: metrics.NewSet()})
				require.NoError(t, err)
				t.Cleanup(r.Close)
				key := Key{Upstream: "default", Model: "m"}
				l, err := r.Get(key)
				require.NoError(t, err)
				// syncAt syncs the lane now, the other Governor having
				// synced last at othersSynced; sync, now.
				syncAt := func(othersSynced time.Time) Report {
					now := time.Now()
					rep, snap := l.report(64, now, time.Duration(demandMemory*float64(testInterval)), r.cfg.LeaseTTL)
					l.adopt(snap, Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: othersSynced}, now, testGrace)
					return rep
				}
				sync := func() Report { return syncAt(time.Now()) }
				info := func() Info { return r.info(l, time.Now(), l.q.Stats().InFlight) }
				sync()
				time.Sleep(testInterval)
				sync()
				require.Equal(t, 8, info().Limit, "joined: its share")

				time.Sleep(parkAfter(r.cfg.LeaseTTL))
				require.True(t, sync().Parked, "idle for a third of the lease: the lane parks")
				require.True(t, info().Parked)
				assert.Equal(t, 0, info().Limit, "a parked lane's limit reads 0: it has no share")
				assert.Nil(t, info().PausedUntil, "and it is not paused")
				select {
				case <-r.kick: // the lane's join
				default:
				}

				// A call takes the lane; the sync it asks for lands late,
				// after any hold a clock would end.
				_, err = r.Get(key)
				require.NoError(t, err)
				select {
				case <-r.kick:
				default:
					t.Fatal("the call asked for no sync")
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				granted := make(chan error, 1)
				go func() { granted <- l.q.Acquire(ctx, queue.Priority{}) }()
				time.Sleep(2 * r.cfg.LeaseTTL)
				synctest.Wait()
				select {
				case <-granted:
					t.Fatalf("a call went out before the lane's sync, at a limit of %d", l.q.Stats().Limit)
				default:
				}
				assert.Equal(t, 0, info().Limit, "the lane has no share until its sync")
				assert.False(t, info().Parked, "a lane that got a call is no longer parked")

				switch {
				case tc.fails:
					l.fallback()
					require.NoError(t, <-granted, "a failed sync lets the call out at once")
					assert.Equal(t, 8, info().Limit, "governed locally from its fair part")
					assert.False(t, info().Coordinated)
				case tc.othersLate:
					assert.False(t, syncAt(time.Now().Add(-testInterval)).Parked)
					time.Sleep(2 * r.cfg.LeaseTTL) // the next sync is late too
					synctest.Wait()
					select {
					case <-granted:
						t.Fatalf("a call went out on no share, at a limit of %d", l.q.Stats().Limit)
					default:
					}
					assert.Equal(t, 0, info().Limit, "no share yet")
					sync()
					require.NoError(t, <-granted, "the call goes out once a sync gave the lane its share")
					assert.Equal(t, 8, info().Limit)
				default:
					assert.False(t, sync().Parked)
					require.NoError(t, <-granted, "the call goes out once the sync gave the lane its share")
					assert.Equal(t, 8, info().Limit)
				}
				l.q.ReleaseTenant("")
			})
		})
	}
}

// A call that takes a lane while the sync that parks it is under way is
// not left for the parked pace: the lane wakes as that sync lands and asks
// for the next at once, which gives it a share.
func TestLaneTakenWhileItParks(t *testing.T) {
	c := newCoordLane(t)
	shared := func() Shared {
		return Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: c.clock.Now()}
	}
	c.sync(shared())
	c.clock.Set(ms(50))
	c.sync(shared())
	require.Equal(t, 8, c.info().Limit, "joined: its share")
	c.clock.Set(ms(50).Add(parkAfter(c.r.cfg.LeaseTTL)))
	now := c.clock.Now()
	rep, snap := c.l.report(64, now, time.Duration(demandMemory*float64(testInterval)), c.r.cfg.LeaseTTL)
	require.True(t, rep.Parked, "idle for a third of the lease: the report parks the lane")
	select {
	case <-c.r.kick: // the lane's join
	default:
	}

	_, err := c.r.Get(c.l.key) // a call, while the sync is under way
	require.NoError(t, err)
	c.l.adopt(snap, shared(), now, testGrace)
	assert.False(t, c.info().Parked, "the lane taken during the sync is not parked")
	select {
	case <-c.r.kick:
	default:
		t.Fatal("the lane taken during the sync asks for no sync")
	}
	assert.False(t, c.canDispatch(), "it gave its share up: no call before the next sync")

	c.clock.Set(now.Add(testInterval))
	assert.False(t, c.sync(shared()).Parked)
	assert.True(t, c.canDispatch(), "the next sync gives it its share")
	assert.Equal(t, 8, c.info().Limit)
}

// Over a real Redis that answers nothing (frozen): a parked lane woken by
// a call lets it out once the sync that call asked for fails (the
// Coordinator's timeout), governed locally, as every lane falls back when
// Redis is lost. A waking lane waits for one sync, never for Redis.
func TestWakingLaneGoesLocalWhenRedisIsFrozen(t *testing.T) {
	srv := redistest.Start(t)
	clock := &fakeClock{now: t0}
	r, l := redisLane(t, srv, "a", clock)
	for _, at := range []int{0, 50} {
		clock.Set(ms(at))
		r.syncLanes()
	}
	require.True(t, l.co.joined)
	clock.Set(ms(50).Add(parkAfter(r.cfg.LeaseTTL)))
	r.syncLanes()
	require.True(t, r.info(l, clock.Now(), 0).Parked, "idle for a third of the lease: parked")

	srv.Freeze()
	t.Cleanup(srv.Thaw)
	_, err := r.Get(l.key)
	require.NoError(t, err)
	assert.False(t, l.q.TryAcquire(queue.Priority{}), "no call before the lane's sync")
	clock.Set(clock.Now().Add(testInterval))
	r.syncLanes() // fails after the Coordinator's timeout
	li := r.info(l, clock.Now(), 0)
	assert.False(t, li.Coordinated, "the failed sync governs the lane alone")
	assert.False(t, li.Parked)
	assert.Positive(t, li.Limit)
	assert.True(t, l.q.TryAcquire(queue.Priority{}), "and lets its call out at once")
	l.q.ReleaseTenant("")
}

// A woken lane that no other Governor could have taken slots from (none
// on the lane, or every other parked) takes its share from the one sync
// its call asked for, with a real Coordinator's instants: the lane reports
// at one instant, the Coordinator reads its clock after it (OthersSynced,
// when no other Governor counts), and the lane adopts the answer later.
func TestLoneWakingLaneGoesAfterOneSync(t *testing.T) {
	c := newCoordLane(t)
	// syncOver reports at ms(at), the Coordinator's instant is 1 ms
	// later, and the lane adopts 2 ms later. other, if not 0, is when
	// another Governor, busy on the lane, synced last (ms).
	syncOver := func(at, other int) Report {
		c.clock.Set(ms(at))
		rep, snap := c.l.report(64, ms(at), time.Duration(demandMemory*float64(testInterval)), c.r.cfg.LeaseTTL)
		s := Shared{Target: 16, Members: 1, Share: 16, Fair: 16, OthersSynced: ms(at + 1)}
		if other != 0 {
			s = Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(other)}
		}
		c.clock.Set(ms(at + 2))
		c.l.adopt(snap, s, ms(at+2), testGrace)
		return rep
	}
	idle := int(parkAfter(c.r.cfg.LeaseTTL) / time.Millisecond)
	syncOver(0, 0)
	syncOver(50, 0)
	require.Equal(t, 16, c.info().Limit, "alone: the whole limit")
	require.True(t, syncOver(100+idle, 0).Parked)

	_, err := c.r.Get(c.l.key)
	require.NoError(t, err)
	assert.False(t, syncOver(110+idle, 0).Parked)
	assert.True(t, c.canDispatch(), "the call goes out after the one sync it asked for")
	assert.Equal(t, 16, c.info().Limit)

	// Another Governor, busy on the lane, that synced before this one's
	// report may still use the slots this one gave up: the share waits
	// for its next sync, as any share that grows does.
	at := 200 + 2*idle
	require.True(t, syncOver(at, at-10).Parked)
	_, err = c.r.Get(c.l.key)
	require.NoError(t, err)
	assert.False(t, syncOver(at+10, at-5).Parked)
	assert.False(t, c.canDispatch(), "not before the other Governor has synced since")
	syncOver(at+60, at+55)
	assert.True(t, c.canDispatch(), "then it goes")
	assert.Equal(t, 8, c.info().Limit)
}
