package lane

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adoptStep is one event in the life of a coordinated lane, at an instant,
// and the lane as it stands after it.
type adoptStep struct {
	at       int     // milliseconds after t0
	shared   *Shared // a sync that returned this state
	fail     bool    // a sync that failed
	answered bool    // a call of the lane succeeded
	// The lane after the step:
	limit       int  // the queue's limit
	held        bool // no call may be dispatched (a pause, or no share)
	coordinated bool
}

// Every step of every case is a sync (or a failed one, or a success) at an
// explicit instant, with no sync loop: what adopt and fallback make of the
// shared state, step by step.
func TestAdoptAndFallback(t *testing.T) {
	// sh is the shared state of a lane of target 16 between 2 Governors,
	// when every other Governor last synced at others.
	sh := func(share, fair, others int) *Shared {
		return &Shared{Target: 16, Members: 2, Share: share, Fair: fair, OthersSynced: ms(others)}
	}
	paused := func(s *Shared, until, asked int) *Shared {
		c := *s
		c.PausedUntil, c.PausedAt = ms(until), ms(asked)
		return &c
	}
	join := []adoptStep{
		{at: 0, limit: 1, held: true},                               // before the first sync: held
		{at: 0, shared: sh(8, 8, 0), limit: 1, coordinated: true},   // the others have not synced since
		{at: 50, shared: sh(8, 8, 50), limit: 8, coordinated: true}, // they have: the share
	}
	for _, tc := range []struct {
		name  string
		steps []adoptStep
	}{
		{"a joining Governor takes its share once the others have synced", join},
		{"a smaller share applies at once, a larger one once the others have synced", append(join[:3:3],
			adoptStep{at: 100, shared: sh(5, 5, 100), limit: 5, coordinated: true},
			adoptStep{at: 150, shared: sh(8, 8, 100), limit: 5, coordinated: true},
			adoptStep{at: 200, shared: sh(8, 8, 200), limit: 8, coordinated: true})},
		{"without a record of the others' syncs, a larger share waits a grace", []adoptStep{
			{at: 0, shared: &Shared{Target: 16, Members: 2, Share: 8, Fair: 8}, limit: 1, coordinated: true},
			{at: 50, shared: &Shared{Target: 16, Members: 2, Share: 8, Fair: 8}, limit: 1, coordinated: true},
			{at: 100, shared: &Shared{Target: 16, Members: 2, Share: 8, Fair: 8}, limit: 8, coordinated: true}}},
		{"another Governor's pause holds the lane until the record drops it", append(join[:3:3],
			adoptStep{at: 100, shared: paused(sh(8, 8, 100), 1100, 90), limit: 8, held: true, coordinated: true},
			adoptStep{at: 150, shared: paused(sh(8, 8, 150), 1100, 90), limit: 8, held: true, coordinated: true},
			adoptStep{at: 200, shared: sh(8, 8, 200), limit: 8, coordinated: true})},
		{"a pause asked for before this Governor's last success is over", append(join[:3:3],
			adoptStep{at: 95, answered: true, limit: 8, coordinated: true},
			adoptStep{at: 100, shared: paused(sh(8, 8, 100), 1100, 90), limit: 8, coordinated: true})},
		{"no share holds the lane until a share is given and the others have synced", append(join[:3:3],
			adoptStep{at: 100, shared: sh(0, 0, 100), limit: 1, held: true, coordinated: true},
			adoptStep{at: 150, shared: sh(2, 2, 150), limit: 1, held: true, coordinated: true},
			adoptStep{at: 200, shared: sh(2, 2, 200), limit: 2, coordinated: true})},
		{"a failed sync releases a held lane, which governs alone from a fair part", append(join[:3:3],
			adoptStep{at: 100, shared: sh(0, 0, 100), limit: 1, held: true, coordinated: true},
			adoptStep{at: 150, fail: true, limit: 8})},
		{"a failed sync governs alone from the share or the fair part, whichever is larger", []adoptStep{
			{at: 0, shared: &Shared{Target: 10.5, Members: 2, Share: 3, Fair: 3, OthersSynced: ms(0)}, limit: 1, coordinated: true},
			{at: 50, shared: &Shared{Target: 10.5, Members: 2, Share: 3, Fair: 3, OthersSynced: ms(50)}, limit: 3, coordinated: true},
			{at: 100, fail: true, limit: 5}}},
		{"a first sync that fails governs alone from the start", []adoptStep{
			{at: 0, fail: true, limit: 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoordLane(t)
			for i, st := range tc.steps {
				c.clock.Set(ms(st.at))
				switch {
				case st.shared != nil:
					c.sync(*st.shared)
				case st.fail:
					c.l.fallback()
				case st.answered:
					c.l.Answered(ms(st.at))
				}
				where := fmt.Sprintf("step %d (%+v)", i, st)
				li := c.info()
				assert.Equal(t, st.limit, li.Limit, where)
				assert.Equal(t, !st.held, c.canDispatch(), "dispatch: %s", where)
				assert.Equal(t, st.coordinated, li.Coordinated, where)
			}
		})
	}
}

// Another Governor's decrease takes effect here when this Governor hears of
// it, not when it was made, and only once.
func TestAdoptTakesAnotherGovernorsDecreaseNow(t *testing.T) {
	c := newCoordLane(t)
	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(0)})

	c.clock.Set(ms(100))
	c.sync(Shared{Target: 10, Members: 2, Share: 5, Fair: 5, OthersSynced: ms(100), LastDecrease: ms(80), DecreaseLevel: 12})
	st := c.l.ctrl.State()
	assert.Equal(t, 10.0, st.Target)
	assert.Equal(t, ms(100), st.LastDecrease, "the decrease is dated when it is heard of")
	assert.Zero(t, st.Decreases, "the Governor that made it counted it")

	c.clock.Set(ms(150))
	c.sync(Shared{Target: 10, Members: 2, Share: 5, Fair: 5, OthersSynced: ms(150), LastDecrease: ms(80), DecreaseLevel: 12})
	assert.Equal(t, ms(100), c.l.ctrl.State().LastDecrease, "a decrease already adopted is not adopted again")
}

// adopt logs the share it applied from what it read under the lane's lock:
// decreases, which cut the share, run concurrently on the calls'
// goroutines (a data race here fails the test under -race).
func TestAdoptLogsTheShareItRead(t *testing.T) {
	debug := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newCoordLane(t, withLogger(debug))
	s := Shared{Target: 64, Members: 2, Share: 32, Fair: 32, OthersSynced: ms(0)}
	c.sync(s)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			c.l.adopt(syncSnap{}, s, ms(i), testGrace)
		}
	})
	wg.Go(func() {
		for i := range 200 {
			// Each 429 is of a call dispatched after the last decrease:
			// each decreases the limit, and so the share.
			c.l.Observe(RateLimited, time.Millisecond, ms(2*i), ms(2*i+1))
		}
	})
	wg.Wait()
	assert.Positive(t, c.l.ctrl.State().Decreases+c.l.ctrl.State().Collapses)
}

// A cut of this Governor's share that another Governor's decrease brings
// is counted and logged with its cause, other_governor: the operator of a
// Governor that saw no refusal of its own sees why its lane slowed down.
func TestAnotherGovernorsDecreaseIsACause(t *testing.T) {
	var buf bytes.Buffer
	c := newCoordLane(t, withLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(0)})
	c.clock.Set(ms(50))
	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(50)})
	assert.Equal(t, 8, c.info().Limit)

	c.clock.Set(ms(100))
	c.sync(Shared{Target: 10, Members: 2, Share: 5, Fair: 5, OthersSynced: ms(100), LastDecrease: ms(80), DecreaseLevel: 12})
	assert.Equal(t, 5, c.info().Limit)
	assert.EqualValues(t, 1, c.l.m.byCause[CauseOtherGovernor].Get())
	assert.Equal(t, "other_governor", c.info().LastDecreaseCause)
	assert.Contains(t, buf.String(), `"msg":"lane limit decreased","lane":"default/m/000000000000","from":8,"to":5,"cause":"other_governor"`)

	c.clock.Set(ms(150))
	c.sync(Shared{Target: 10, Members: 2, Share: 5, Fair: 5, OthersSynced: ms(150), LastDecrease: ms(80), DecreaseLevel: 12})
	assert.EqualValues(t, 1, c.l.m.byCause[CauseOtherGovernor].Get(), "a decrease is taken once")
}

// This Governor's own decrease, which the shared record keeps to the
// millisecond, is not taken for another Governor's when it comes back.
func TestOwnDecreaseIsNotAnotherGovernors(t *testing.T) {
	c := newCoordLane(t)
	c.sync(Shared{Target: 16, Members: 1, Share: 16, Fair: 16, OthersSynced: ms(0)})
	c.clock.Set(ms(50))
	c.sync(Shared{Target: 16, Members: 1, Share: 16, Fair: 16, OthersSynced: ms(50)})
	require.Equal(t, 16, c.info().Limit)
	at := ms(100).Add(300 * time.Microsecond)
	c.clock.Set(at)
	c.l.Observe(RateLimited, time.Millisecond, at, at)
	require.EqualValues(t, 1, c.l.ctrl.State().Decreases)
	st := c.l.ctrl.State()
	// The shared limit the record keeps is below this Governor's own:
	// the sync cuts its share, for its own decrease.
	c.sync(Shared{Target: st.Target - 2, Members: 1, Share: int(st.Target) - 2, Fair: int(st.Target) - 2, OthersSynced: ms(100),
		LastDecrease: time.UnixMilli(at.UnixMilli())})
	require.Less(t, c.info().Limit, int(st.Target))
	assert.Zero(t, c.l.m.byCause[CauseOtherGovernor].Get())
}

// This Governor's own decrease, back from the record to the millisecond,
// keeps its instant: re-dated to the sync, it would hold the lane's growth
// for longer than the controller holds it after a decrease of its own. A
// sync that reported a decrease the record did not take (another
// Governor's came first) adopts the record's, dated at the sync.
func TestOwnDecreaseKeepsItsInstant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record func(at time.Time) time.Time // the record's last decrease after the sync
		dated  func(at time.Time) time.Time // the controller's after it
	}{
		{"the record took it", func(at time.Time) time.Time { return time.UnixMilli(at.UnixMilli()) },
			func(at time.Time) time.Time { return at }},
		{"the record kept another's", func(time.Time) time.Time { return ms(99) },
			func(time.Time) time.Time { return ms(150) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoordLane(t)
			c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(0)})
			c.clock.Set(ms(50))
			c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: ms(50)})
			require.Equal(t, 8, c.info().Limit)
			at := ms(100).Add(300 * time.Microsecond) // within a millisecond
			c.clock.Set(at)
			c.l.Observe(RateLimited, time.Millisecond, at, at)
			st := c.l.ctrl.State()
			require.EqualValues(t, 1, st.Decreases)
			require.Equal(t, at, st.LastDecrease)

			c.clock.Set(ms(150))
			rep := c.sync(Shared{Target: 11, Members: 2, Share: 5, Fair: 5, OthersSynced: ms(150),
				LastDecrease: tc.record(at), DecreaseLevel: st.DecreaseLevel})
			require.True(t, rep.Decreased)
			assert.Equal(t, at, rep.DecreaseAt)
			assert.Equal(t, tc.dated(at), c.l.ctrl.State().LastDecrease)
			assert.Equal(t, 5, c.info().Limit)
		})
	}
}
