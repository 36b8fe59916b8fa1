package lane

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// t0 is the start of every test's clock.
var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// ms is the instant n milliseconds after t0.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// fakeClock is a clock that moves only when the test says.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// fakeCoordinator is a Coordinator that is up, books no wait and records
// what it is asked; the tests call report and adopt themselves.
type fakeCoordinator struct {
	mu          sync.Mutex
	down        bool
	reserves    int
	rate, burst float64 // of the last Reserve
}

func (f *fakeCoordinator) Sync(ctx context.Context, reports []Report) ([]Shared, error) {
	panic("the tests sync lanes themselves")
}

func (f *fakeCoordinator) Reserve(ctx context.Context, id string, rate, burst float64) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserves++
	f.rate, f.burst = rate, burst
	return 0, nil
}

func (f *fakeCoordinator) Up() bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.down }

func (f *fakeCoordinator) Cause() string {
	if f.Up() {
		return ""
	}
	return "refused"
}

func (f *fakeCoordinator) Leave(ctx context.Context, ids []string) error { return nil }

// testInterval is the sync interval of the tests' coordinated lanes, and
// testGrace the grace a sync loop would give adopt.
const (
	testInterval = 50 * time.Millisecond
	testGrace    = testInterval * 3 / 2
)

// coordLane is one coordinated lane with no sync loop: the test syncs it
// (report, then adopt) at the instants it chooses.
type coordLane struct {
	t     *testing.T
	clock *fakeClock
	r     *Registry
	l     *Lane
}

// withLogger sets a coordLane's logger.
func withLogger(log *slog.Logger) func(*Config) { return func(c *Config) { c.Logger = log } }

func newCoordLane(t *testing.T, opts ...func(*Config)) *coordLane {
	t.Helper()
	clock := &fakeClock{now: t0}
	cfg := Config{AIMD: aimd.Config{Max: 64}, Coordinator: &fakeCoordinator{}, SyncInterval: testInterval,
		Now: clock.Now, Metrics: metrics.NewSet()}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := newRegistry(cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return &coordLane{t: t, clock: clock, r: r, l: l}
}

// sync reports the lane at the clock's instant and adopts s then.
func (c *coordLane) sync(s Shared) Report {
	now := c.clock.Now()
	rep, snap := c.l.report(c.r.cfg.AIMD.Max, now, time.Duration(demandMemory*float64(testInterval)), c.r.cfg.LeaseTTL)
	c.l.adopt(snap, s, now, testGrace)
	return rep
}

// info is the lane as GET /governor/lanes shows it now.
func (c *coordLane) info() Info {
	return c.r.info(c.l, c.clock.Now(), c.l.q.Stats().InFlight)
}

// canDispatch reports whether a call would be let out now, without keeping
// the slot.
func (c *coordLane) canDispatch() bool {
	if !c.l.q.TryAcquire(queue.Priority{}) {
		return false
	}
	c.l.q.ReleaseTenant("")
	return true
}

// schedule is the queue of a discrete-event test run: its events come out
// in the order of their instants (at), those of one instant in the order
// they were pushed.
type schedule[E any] struct {
	at     func(E) time.Time
	events []E
}

func newSchedule[E any](at func(E) time.Time) *schedule[E] { return &schedule[E]{at: at} }

func (s *schedule[E]) push(e E) {
	t := s.at(e)
	i := sort.Search(len(s.events), func(i int) bool { return s.at(s.events[i]).After(t) })
	s.events = slices.Insert(s.events, i, e)
}

// len is the number of events still to come.
func (s *schedule[E]) len() int { return len(s.events) }

// pop takes the next event; the schedule must not be empty.
func (s *schedule[E]) pop() E {
	e := s.events[0]
	s.events = s.events[1:]
	return e
}
