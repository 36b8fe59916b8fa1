package coord

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/internal/redistest"
)

// clock is a settable clock shared by a test's coordinators.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type testCoord struct {
	*Coordinator
	set *metrics.Set
	log *syncBuffer
	// scripts counts the scripts run on Redis, for a Coordinator that
	// found Redis up (see scriptCounter); nil otherwise.
	scripts *atomic.Int64
}

func newCoord(t *testing.T, srv *redistest.Server, instance string, clk *clock) *testCoord {
	t.Helper()
	return newCoordSync(t, srv, instance, clk, 20*time.Millisecond)
}

// newCoordSync is newCoord for a caller that syncs every interval.
func newCoordSync(t *testing.T, srv *redistest.Server, instance string, clk *clock, interval time.Duration) *testCoord {
	t.Helper()
	if clk == nil {
		return newCoordClock(t, srv, instance, nil, interval)
	}
	tc := newCoordClock(t, srv, instance, clk.Now, interval)
	// A test's clock stands for every Governor's and Redis's: the
	// instants go to Redis as the test gives them.
	tc.offset.Store(0)
	tc.clockCheck.Store(math.MaxInt64)
	return tc
}

// newCoordClock is newCoordSync with any clock (nil: the real one).
func newCoordClock(t *testing.T, srv *redistest.Server, instance string, now func() time.Time, interval time.Duration) *testCoord {
	t.Helper()
	return newCoordURL(t, srv.URL(), instance, now, interval)
}

// newCoordURL is newCoordClock for the Redis at url.
func newCoordURL(t *testing.T, url, instance string, now func() time.Time, interval time.Duration) *testCoord {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	set := metrics.NewSet()
	buf := &syncBuffer{}
	cfg := Config{Options: opts, Instance: instance, Metrics: set, Logger: slog.New(slog.NewTextHandler(buf, nil)),
		Timeout: 200 * time.Millisecond, SyncInterval: interval, LeaseTTL: max(time.Second, 2*interval), Now: now}
	co, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { co.Close() })
	tc := &testCoord{Coordinator: co, set: set, log: buf}
	if co.Up() {
		// Nothing runs commands now (the background loop waits while
		// Redis is up): the hook can be added. (AddHook is not safe
		// while commands run.)
		h := &scriptCounter{}
		co.rdb.AddHook(h)
		tc.scripts = &h.n
	}
	return tc
}

func (tc *testCoord) metric(name string) string {
	var b bytes.Buffer
	tc.set.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// scriptCounter counts the scripts a Coordinator runs on Redis: every
// command of Sync and Reserve (not the background loop's pings while Redis
// is lost).
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) count(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		h.n.Add(1)
	}
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func sync1(t *testing.T, co *testCoord, r Report) Shared {
	t.Helper()
	if r.Lane == "" {
		r.Lane = "default/m/abc123"
	}
	if r.Max == 0 {
		r.Max = 64
	}
	out, err := co.Sync(context.Background(), []Report{r})
	require.NoError(t, err)
	require.Len(t, out, 1)
	return out[0]
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestSyncMergesTargets(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)

	s := sync1(t, a, Report{Initial: 8, Demand: 100})
	assert.Equal(t, 8.0, s.Target, "a new record starts at the first report's initial target")
	assert.Equal(t, 1, s.Members)
	assert.Equal(t, 8, s.Share, "alone: the whole limit")

	s = sync1(t, b, Report{Initial: 30, Demand: 100})
	assert.Equal(t, 8.0, s.Target, "an existing record keeps its target")
	assert.Equal(t, 2, s.Members)
	assert.Equal(t, 4, s.Share)

	// Increases from both add up.
	sync1(t, a, Report{Increase: 1.5, Demand: 100, InFlight: 8})
	s = sync1(t, b, Report{Increase: 0.5, Demand: 2, InFlight: 2})
	assert.Equal(t, 10.0, s.Target)
	assert.Equal(t, 2, s.Share, "b needs 2: it gets 2")
	assert.Equal(t, 8, sync1(t, a, Report{Demand: 100, InFlight: 8}).Share, "a gets the rest")

	// Clamped to max.
	s = sync1(t, a, Report{Increase: 500, Demand: 100, InFlight: 100})
	assert.Equal(t, 64.0, s.Target)
	s = sync1(t, a, Report{Decreased: true, DecreaseTarget: -3, DecreaseDispatched: t0, DecreaseAt: t0, Demand: 100})
	assert.Equal(t, 1.0, s.Target, "and to 1")

	// Lanes are separate.
	s = sync1(t, a, Report{Lane: "default/other/abc123", Initial: 5, Demand: 1})
	assert.Equal(t, 5.0, s.Target)
	assert.Equal(t, 1, s.Members)
}

func TestOneDecreasePerRoundTrip(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 20, Demand: 100})

	dispatched := t0.Add(-time.Second)
	s := sync1(t, a, Report{Decreased: true, DecreaseTarget: 18, DecreaseDispatched: dispatched, DecreaseAt: t0, DecreaseLevel: 20})
	assert.Equal(t, 18.0, s.Target)
	assert.WithinDuration(t, t0, s.LastDecrease, 0)
	assert.Equal(t, 20.0, s.DecreaseLevel)

	// b's 429 came from a call dispatched before a's decrease: explained by it.
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 18, DecreaseDispatched: t0.Add(-time.Millisecond),
		DecreaseAt: t0.Add(10 * time.Millisecond), DecreaseLevel: 20})
	assert.Equal(t, 18.0, s.Target, "no second decrease for the same round trip")
	assert.WithinDuration(t, t0, s.LastDecrease, 0)

	// A call sent after the decrease that is limited again: a new decrease.
	// A decrease by a Governor that had not seen the last one: its call
	// was sent at its old share.
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 9, DecreaseDispatched: t0.Add(time.Millisecond),
		DecreaseAt: t0.Add(time.Second), DecreaseLevel: 18})
	assert.Equal(t, 18.0, s.Target, "explained by the decrease b had not seen")

	// An increase earned before b knew of the decrease is dropped too.
	// (A second later, past the hold below the ceiling: see
	// TestHoldBelowAStableCeiling.)
	clk.Add(time.Second)
	s = sync1(t, b, Report{Increase: 3, SeenDecrease: t0.Add(-time.Hour), Demand: 100})
	assert.Equal(t, 18.0, s.Target)
	s = sync1(t, b, Report{Increase: 3, SeenDecrease: t0, Demand: 100, InFlight: 19})
	assert.Equal(t, 20.0, s.Target, "once b knows of it, its increases count (up to the ceiling)")

	// A decrease never raises the target.
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 25, DecreaseDispatched: t0.Add(time.Millisecond),
		DecreaseAt: t0.Add(time.Second), DecreaseLevel: 26, SeenDecrease: t0})
	assert.Equal(t, 20.0, s.Target)
	assert.WithinDuration(t, t0, s.LastDecrease, 0)

	// A call sent just after the decrease, by a Governor that knew of it:
	// the others' calls sent at their old shares were still in flight,
	// explained by the decrease. A round trip later (100ms when no one
	// reports a latency), a new decrease.
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 9, DecreaseDispatched: t0.Add(50 * time.Millisecond),
		DecreaseAt: t0.Add(2 * time.Second), DecreaseLevel: 18, SeenDecrease: t0})
	assert.Equal(t, 20.0, s.Target, "within a round trip of the last decrease: explained by it")
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 9, DecreaseDispatched: t0.Add(101 * time.Millisecond),
		DecreaseAt: t0.Add(2 * time.Second), DecreaseLevel: 18, SeenDecrease: t0})
	assert.Equal(t, 9.0, s.Target)
	assert.WithinDuration(t, t0.Add(2*time.Second), s.LastDecrease, 0)
}

// A collapse (nothing a Governor sent got through) is shared only if no
// other Governor's call succeeded meanwhile.
func TestCollapseNeedsAStormEverywhere(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 20, LastSuccess: t0.Add(time.Second)})
	s := sync1(t, b, Report{Decreased: true, Collapsed: true, DecreaseTarget: 1, DecreaseDispatched: t0.Add(500 * time.Millisecond),
		DecreaseAt: t0.Add(2 * time.Second), DecreaseLevel: 20})
	assert.Equal(t, 20.0, s.Target, "a got through after b's call was sent: no storm")
	s = sync1(t, b, Report{Decreased: true, Collapsed: true, DecreaseTarget: 1, DecreaseDispatched: t0.Add(1500 * time.Millisecond),
		DecreaseAt: t0.Add(2 * time.Second), DecreaseLevel: 20})
	assert.Equal(t, 1.0, s.Target, "nothing got through anywhere since: a storm")
}

func TestPauseIsShared(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	until := t0.Add(2 * time.Second)
	sync1(t, a, Report{Initial: 8, PausedUntil: until, PausedAt: t0})
	s := sync1(t, b, Report{})
	assert.WithinDuration(t, until, s.PausedUntil, 0, "b sees a's pause")
	assert.WithinDuration(t, t0, s.PausedAt, 0, "and when it was asked for")
	sync1(t, b, Report{PausedUntil: t0.Add(time.Second)})
	assert.WithinDuration(t, until, sync1(t, a, Report{}).PausedUntil, 0, "an earlier pause does not shorten it")
}

func TestLeaseExpiry(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 10, Demand: 100})
	assert.Equal(t, 5, sync1(t, b, Report{Demand: 100}).Share)
	clk.Add(900 * time.Millisecond)
	assert.Equal(t, 5, sync1(t, b, Report{Demand: 100}).Share, "a's lease still runs")
	clk.Add(200 * time.Millisecond)
	s := sync1(t, b, Report{Demand: 100})
	assert.Equal(t, 1, s.Members, "a's lease expired")
	assert.Equal(t, 10, s.Share)

	// Leave gives the share back at once.
	sync1(t, a, Report{Demand: 100})
	require.NoError(t, a.Leave(context.Background(), []string{"default/m/abc123"}))
	assert.Equal(t, 10, sync1(t, b, Report{Demand: 100}).Share)
}

func TestRateIsShared(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 8, Rate: 20, Burst: 40})
	s := sync1(t, b, Report{})
	assert.Equal(t, 20.0, s.Rate, "b paces by a's rate without seeing headers")
	assert.Equal(t, 40.0, s.Burst)
	clk.Add(rateMemory + time.Second)
	assert.Zero(t, sync1(t, b, Report{}).Rate, "a rate nobody has seen for a while is forgotten")
}

// Each Governor publishes a lower bound on the provider's rate, from its
// own calls' reports: the shared rate is the largest published lately,
// not the last, and a lower one takes over once the larger is older than
// rateSpan (from half of it).
func TestSharedRateIsTheLargestPublishedLately(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 8, Rate: 32, Burst: 33})
	assert.Equal(t, 32.0, sync1(t, b, Report{Rate: 30, Burst: 33}).Rate, "b's lower bound is below a's")
	clk.Add(time.Second)
	assert.Equal(t, 32.0, sync1(t, a, Report{Rate: 31, Burst: 33}).Rate, "a's own lower bound fell back")
	assert.Equal(t, 32.9, sync1(t, b, Report{Rate: 32.9, Burst: 33}).Rate, "b's rose above it")
	// The provider halves its rate: the Governors' bounds follow within
	// their own memory, the shared one within rateSpan.
	for range 2 * int(rateSpan/time.Second) {
		clk.Add(time.Second)
		sync1(t, a, Report{Rate: 16, Burst: 33})
		sync1(t, b, Report{Rate: 16.4, Burst: 33})
	}
	assert.Equal(t, 16.4, sync1(t, a, Report{Rate: 16, Burst: 33}).Rate)
	// A Governor that knows no lower bound publishes none: the rate stands.
	clk.Add(rateSpan)
	assert.Equal(t, 16.4, sync1(t, a, Report{}).Rate, "the last rate stands until the rate memory runs out")
}

func TestReserveGCRA(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	ctx := context.Background()
	var waits []time.Duration
	for i := range 5 {
		co := a
		if i%2 == 1 {
			co = b
		}
		w, err := co.Reserve(ctx, "l", 10, 2)
		require.NoError(t, err)
		waits = append(waits, w)
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{0, 0, 100 * ms, 200 * ms, 300 * ms}, waits, "10/s with a burst of 2, booked by two Governors")
	clk.Add(time.Second)
	w, err := a.Reserve(ctx, "l", 10, 2)
	require.NoError(t, err)
	assert.Zero(t, w, "refilled")
}

func TestFallbackAndRejoin(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	a := newCoord(t, srv, "a", nil)
	require.True(t, a.Up())
	sync1(t, a, Report{Initial: 8})
	assert.Equal(t, "1", a.metric("governor_redis_up"))

	srv.Kill()
	_, err := a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	assert.False(t, a.Up())
	assert.Equal(t, "0", a.metric("governor_redis_up"))
	assert.Equal(t, "1", a.metric("governor_redis_fallbacks_total"))
	scripts := a.scripts.Load()
	_, err = a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	assert.ErrorIs(t, err, ErrLocal)
	_, err = a.Reserve(context.Background(), "l", 10, 1)
	assert.ErrorIs(t, err, ErrLocal)
	assert.Equal(t, scripts, a.scripts.Load(), "in local mode nothing waits for Redis: no command is sent")
	assert.Contains(t, a.log.String(), "redis coordination lost")

	srv.Restart()
	require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond, "rejoins when Redis answers")
	assert.Contains(t, a.log.String(), "redis coordination restored")
	s := sync1(t, a, Report{Lane: "l", Initial: 4}) // scripts reloaded after the restart
	assert.Equal(t, 4.0, s.Target)
	assert.Equal(t, "1", a.metric("governor_redis_fallbacks_total"), "one fallback, counted once")
}

// While Redis is down, every ping that finds it still down is a failed
// command: governor_redis_errors_total goes on counting through the
// outage, so a graph of its rate shows the outage for as long as it lasts.
func TestErrorsCountedWhileRedisIsDown(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	a := newCoord(t, srv, "a", nil)
	sync1(t, a, Report{Initial: 8})
	assert.Equal(t, "0", a.metric("governor_redis_errors_total"))

	srv.Kill()
	_, err := a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	assert.Equal(t, "1", a.metric("governor_redis_errors_total"), "the sync that found Redis gone")
	require.Eventually(t, func() bool {
		n, err := strconv.Atoi(a.metric("governor_redis_errors_total"))
		return err == nil && n >= 3
	}, 5*time.Second, 10*time.Millisecond, "the pings that find Redis still down are counted")
	assert.False(t, a.Up())
	assert.Equal(t, "1", a.metric("governor_redis_fallbacks_total"), "one fallback for the whole outage")

	srv.Restart()
	require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond, "rejoins when Redis answers")
}

// A Redis that answers nothing (stopped, or a broken network) costs one
// timeout, then nothing.
func TestSlowRedisFallsBackWithinTheTimeout(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	a := newCoord(t, srv, "a", nil)
	sync1(t, a, Report{Initial: 8})
	srv.Freeze()
	_, err := a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	// Ended by the timeout (200ms here): the connection's deadline or the
	// command's context, whichever comes first.
	assert.True(t, strings.Contains(err.Error(), "i/o timeout") || strings.Contains(err.Error(), "context deadline exceeded"),
		"the timeout ended the wait: %v", err)
	assert.False(t, a.Up())
	scripts := a.scripts.Load()
	_, err = a.Reserve(context.Background(), "l", 10, 1)
	assert.ErrorIs(t, err, ErrLocal)
	assert.Equal(t, scripts, a.scripts.Load(), "and then nothing waits: no command is sent (a frozen Redis would take the timeout)")
	srv.Thaw()
	require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond, "rejoins")
	sync1(t, a, Report{})
}

func TestStartsLocalWhenRedisIsDown(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	srv.Kill()
	a := newCoord(t, srv, "a", nil)
	assert.False(t, a.Up())
	assert.Contains(t, a.log.String(), "redis unreachable at start")
	srv.Restart()
	require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond)
}

func TestConfigValidate(t *testing.T) {
	assert.Error(t, Config{}.Validate())
	opts := &redis.Options{Addr: "127.0.0.1:1"}
	assert.NoError(t, Config{Options: opts, Metrics: metrics.NewSet()}.withDefaults().Validate())
	err := Config{Options: opts, Metrics: metrics.NewSet(), SyncInterval: time.Second, LeaseTTL: time.Second}.Validate()
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ErrLocal))
}

// Under a hard cap, the level of the last decrease is a ceiling: the target
// holds just below it, probes one slot above it now and then, and a probe
// that fails again costs one slot, not a multiplicative cut; a decrease
// below the ceiling (the capacity fell) is cut as the reporter cut it.
func TestHoldBelowAStableCeiling(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	rtt := 500 * time.Millisecond
	sync1(t, a, Report{Initial: 33, Demand: 100, InFlight: 50, Latency: rtt})
	sync1(t, b, Report{Demand: 100, InFlight: 50, Latency: rtt})

	// The first decrease is the reporter's cut; 33 is the ceiling.
	s := sync1(t, a, Report{Decreased: true, DecreaseTarget: 29.7, DecreaseDispatched: t0.Add(-time.Millisecond),
		DecreaseAt: t0, DecreaseLevel: 33, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 29.7, s.Target)

	// Slow start back: increases stop just below the ceiling.
	s = sync1(t, b, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 32.0, s.Target, "held at the ceiling - 1")
	clk.Add(time.Second)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 32.0, s.Target, "still held (4 round trips)")

	// The probe: one slot above the hold.
	clk.Add(time.Second + 100*time.Millisecond)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 33.0, s.Target, "probing: one slot more")
	s = sync1(t, b, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 33.0, s.Target, "probing: one slot more, not two")

	// It fails at the ceiling again: back to just below, not ×0.9.
	probe := clk.Now()
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 29.7, DecreaseDispatched: probe.Add(-time.Millisecond),
		DecreaseAt: probe, DecreaseLevel: 33, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 32.0, s.Target, "a probe that fails at the ceiling costs one slot")
	assert.WithinDuration(t, probe, s.LastDecrease, 0)

	// The next probe waits twice as long (8 round trips).
	clk.Add(3 * time.Second)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 32.0, s.Target, "held longer after a confirmed ceiling")
	clk.Add(1100 * time.Millisecond)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 33.0, s.Target, "probing again")

	// A probe that holds for two round trips: capacity grew, the ceiling
	// rises by 1, 2, 4... slots, each probed for two round trips.
	for _, c := range [][2]float64{{33, 34}, {34, 36}, {36, 40}} {
		clk.Add(1100 * time.Millisecond)
		s = sync1(t, a, Report{Increase: 5, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
		assert.Equal(t, c[0], s.Target, "the probe held: the ceiling rises")
		s = sync1(t, a, Report{Increase: 5, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
		assert.Equal(t, c[1], s.Target, "probing the new ceiling")
	}
	clk.Add(1100 * time.Millisecond)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
	s = sync1(t, a, Report{Increase: 2, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 42.0, s.Target)

	// A gentle decrease below the ceiling: the reporter's cut.
	drop := clk.Now()
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 34.2, DecreaseDispatched: drop.Add(-time.Millisecond),
		DecreaseAt: drop, DecreaseLevel: 38, SeenDecrease: probe, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 34.2, s.Target, "the first decrease at a new level")
	// The capacity fell: a decrease below the ceiling is the reporter's
	// cut, however deep.
	drop2 := drop.Add(time.Second)
	clk.Add(time.Second)
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 30.8, DecreaseDispatched: drop2.Add(-time.Millisecond),
		DecreaseAt: drop2, DecreaseLevel: 34, SeenDecrease: drop, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 30.8, s.Target, "below the ceiling: the reporter's cut")
	drop3 := drop2.Add(time.Second)
	clk.Add(time.Second)
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 15.4, DecreaseDispatched: drop3.Add(-time.Millisecond),
		DecreaseAt: drop3, DecreaseLevel: 30, SeenDecrease: drop2, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 15.4, s.Target, "below the ceiling again: the reporter's halving")
}

// A probe is in use only once the Governor given its slot has synced and
// the others have synced since (see Shares): when the Governors sync less
// often than their calls take, two round trips at the ceiling without a
// decrease do not show that the capacity grew; two round trips and two
// sync intervals do.
func TestProbeHoldsForTwoSyncs(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	every := 500 * time.Millisecond
	a, b := newCoordSync(t, srv, "a", clk, every), newCoordSync(t, srv, "b", clk, every)
	rtt := 100 * time.Millisecond
	sync1(t, a, Report{Initial: 33, Demand: 100, InFlight: 50, Latency: rtt})
	sync1(t, b, Report{Demand: 100, InFlight: 50, Latency: rtt})
	s := sync1(t, a, Report{Decreased: true, DecreaseTarget: 29.7, DecreaseDispatched: t0.Add(-time.Millisecond),
		DecreaseAt: t0, DecreaseLevel: 33, Demand: 100, InFlight: 50, Latency: rtt})
	require.Equal(t, 29.7, s.Target, "33 is the ceiling")

	// The probe is due after 4 round trips.
	clk.Add(4*rtt + 10*time.Millisecond)
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	require.Equal(t, 33.0, s.Target, "probing: one slot more")

	clk.Add(2*rtt + every)
	s = sync1(t, b, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 33.0, s.Target, "two round trips and one sync: the probe may not be in use yet")

	clk.Add(every)
	sync1(t, b, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	s = sync1(t, a, Report{Increase: 5, SeenDecrease: t0, Demand: 100, InFlight: 50, Latency: rtt})
	assert.Equal(t, 34.0, s.Target, "two round trips and two syncs: the capacity grew, the ceiling rises")
}

// The target does not grow past what the Governors use: the sum of their
// demands, and one more.
func TestTargetGrowsOnlyToWhatIsUsed(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 30, Demand: 16, InFlight: 16})
	s := sync1(t, b, Report{Increase: 5, Demand: 16, InFlight: 16})
	assert.Equal(t, 33.0, s.Target, "32 in use, and one more")
	s = sync1(t, a, Report{Increase: 5, Demand: 10, InFlight: 10})
	assert.Equal(t, 33.0, s.Target, "less used: no growth, and no cut either")
	s = sync1(t, a, Report{Increase: 5, Demand: 40, InFlight: 33})
	assert.Equal(t, 38.0, s.Target)
}

// A share is what the others leave: a Governor given slots another still
// has calls in takes them as those calls finish.
func TestShareWaitsForTheOthersCalls(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	s := sync1(t, a, Report{Initial: 32, Demand: 40, InFlight: 30})
	assert.Equal(t, 32, s.Share, "alone")
	s = sync1(t, b, Report{Demand: 16})
	assert.Equal(t, 2, s.Share, "a has 30 calls in flight: 2 are left")
	assert.Equal(t, 16, s.Fair, "b's fair part")
	s = sync1(t, a, Report{Demand: 40, InFlight: 30})
	assert.Equal(t, 16, s.Share, "a's share shrinks at once")
	assert.Equal(t, 16, s.Fair)
	s = sync1(t, b, Report{Demand: 16})
	assert.Equal(t, 2, s.Share, "a's calls are still in flight")
	sync1(t, a, Report{Demand: 30, InFlight: 16})
	s = sync1(t, b, Report{Demand: 16})
	assert.Equal(t, 16, s.Share, "a's calls finished")
}

// A target that ran ahead of the calls in flight (a slow start) is cut from
// what was in flight.
func TestCutFromWhatWasInFlight(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 48, Demand: 30, InFlight: 16})
	sync1(t, b, Report{Demand: 30, InFlight: 16})
	s := sync1(t, a, Report{Decreased: true, DecreaseTarget: 43.2, DecreaseDispatched: t0.Add(-time.Millisecond),
		DecreaseAt: t0, DecreaseLevel: 48, Demand: 30, InFlight: 16})
	assert.InDelta(t, 28.8, s.Target, 1e-9, "0.9 of the 32 in flight, not of 48")
}

// A Governor whose controller cut hard (a repeat: no success of its own
// since the decrease it adopted) gets the gentle cut when another
// Governor's call succeeded a round trip after that decrease.
func TestRepeatOnlyIfTheLaneRepeats(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 40, Demand: 30, InFlight: 20})
	sync1(t, b, Report{Demand: 30, InFlight: 20})
	s := sync1(t, a, Report{Decreased: true, DecreaseTarget: 36, DecreaseDispatched: t0.Add(-time.Millisecond),
		DecreaseAt: t0, DecreaseLevel: 40, Demand: 30, InFlight: 20, DecreaseRatio: 0.9})
	assert.Equal(t, 36.0, s.Target)

	// a's calls succeed; b, which adopted the decrease late, cuts hard.
	at := t0.Add(500 * time.Millisecond)
	sync1(t, a, Report{SeenDecrease: t0, LastSuccess: at, Demand: 30, InFlight: 20})
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 18, DecreaseDispatched: at, DecreaseAt: at.Add(time.Millisecond),
		DecreaseLevel: 36, SeenDecrease: t0, Demand: 30, InFlight: 20, DecreaseRatio: 0.9})
	assert.InDelta(t, 32.4, s.Target, 1e-9, "the lane is not in a repeat: 0.9, not 0.5")

	// Nothing succeeded since: a repeat, cut hard.
	at2 := at.Add(500 * time.Millisecond)
	s = sync1(t, b, Report{Decreased: true, DecreaseTarget: 16.2, DecreaseDispatched: at2, DecreaseAt: at2,
		DecreaseLevel: 32, SeenDecrease: at.Add(time.Millisecond), Demand: 30, InFlight: 20, DecreaseRatio: 0.9})
	assert.InDelta(t, 16.2, s.Target, 1e-9)
}

// A sync says since when every other Governor has synced.
func TestOthersSynced(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	s := sync1(t, a, Report{Initial: 32, Demand: 8})
	assert.True(t, t0.Equal(s.OthersSynced), "alone: the sync itself, got %v", s.OthersSynced)
	clk.Add(40 * time.Millisecond)
	sync1(t, b, Report{Demand: 8})
	clk.Add(50 * time.Millisecond)
	s = sync1(t, a, Report{Demand: 8})
	assert.True(t, t0.Add(40*time.Millisecond).Equal(s.OthersSynced), "b's last sync, got %v", s.OthersSynced)
	clk.Add(30 * time.Millisecond)
	s = sync1(t, b, Report{Demand: 8})
	assert.True(t, t0.Add(90*time.Millisecond).Equal(s.OthersSynced), "a's last sync, got %v", s.OthersSynced)
	require.NoError(t, a.Leave(context.Background(), []string{"default/m/abc123"}))
	s = sync1(t, b, Report{Demand: 8})
	assert.True(t, t0.Add(120*time.Millisecond).Equal(s.OthersSynced), "a left: alone, got %v", s.OthersSynced)
}

// A Redis that answers PING but refuses writes (full under maxmemory with
// noeviction, or a replica after a failover) is no Redis to coordinate
// over: the Coordinator stays local until it takes writes again, rather
// than rejoining at every ping and falling back at the next sync.
func TestRedisThatRefusesWritesIsNotRejoined(t *testing.T) {
	for _, tc := range []struct {
		name          string
		refuse, allow []any
		err           string
	}{
		{"full under maxmemory", []any{"config", "set", "maxmemory", "1"}, []any{"config", "set", "maxmemory", "0"}, "OOM"},
		{"a read-only replica", []any{"replicaof", "127.0.0.1", "1"}, []any{"replicaof", "no", "one"}, "READONLY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			srv := redistest.Start(t)
			a := newCoord(t, srv, "a", nil)
			sync1(t, a, Report{Initial: 8})
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			ctx := context.Background()
			require.NoError(t, admin.Do(ctx, tc.refuse...).Err())

			_, err := a.Sync(ctx, []Report{{Lane: "default/m/abc123", Max: 64}})
			require.ErrorIs(t, err, ErrLocal)
			assert.Contains(t, err.Error(), tc.err)
			err = a.join()
			require.Error(t, err, "Redis answers PING but takes no write: no rejoin")
			assert.Contains(t, err.Error(), tc.err)

			require.NoError(t, admin.Do(ctx, tc.allow...).Err())
			require.Eventually(t, a.Up, 5*time.Second, 10*time.Millisecond, "rejoins once Redis takes writes")
			sync1(t, a, Report{})
			assert.Equal(t, "1", a.metric("governor_redis_fallbacks_total"), "one fallback for the whole outage")
			assert.Equal(t, 1, strings.Count(a.log.String(), "redis coordination lost"))
			assert.Equal(t, 1, strings.Count(a.log.String(), "redis coordination restored"))
		})
	}
}

// skewedClock is the real clock off by a settable skew: a host whose
// clock NTP has not set, or has stepped.
type skewedClock struct{ skew atomic.Int64 }

func (c *skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

// Governors whose clocks are seconds apart still see each other and share
// one bucket: every instant goes to Redis on Redis's clock.
func TestGovernorsWithClocksSecondsApart(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	onTime, ahead, behind := &skewedClock{}, &skewedClock{}, &skewedClock{}
	ahead.skew.Store(int64(5 * time.Second))
	behind.skew.Store(int64(-5 * time.Second))
	cos := []*testCoord{newCoordClock(t, srv, "a", onTime.Now, 20*time.Millisecond),
		newCoordClock(t, srv, "b", ahead.Now, 20*time.Millisecond), newCoordClock(t, srv, "c", behind.Now, 20*time.Millisecond)}
	for _, co := range cos {
		sync1(t, co, Report{Initial: 12, Demand: 100})
	}
	for range 2 {
		total := 0
		for i, co := range cos {
			s := sync1(t, co, Report{Initial: 12, Demand: 100, InFlight: 4})
			assert.Equal(t, 3, s.Members, "governor %d sees the three", i)
			total += s.Share
		}
		assert.LessOrEqual(t, total, 12, "the shares fit in the shared limit")
	}

	ctx := context.Background()
	var waits []time.Duration
	for _, co := range []*testCoord{cos[1], cos[0], cos[2], cos[0]} {
		w, err := co.Reserve(ctx, "default/m/abc123", 10, 1)
		require.NoError(t, err)
		waits = append(waits, w)
	}
	for i, w := range waits {
		assert.Less(t, w, time.Duration(i+1)*100*time.Millisecond+50*time.Millisecond,
			"booking %d waits its place in a bucket of 10/s, not the clocks' difference: %v", i, waits)
	}

	// A clock stepped while the Governor runs is measured again.
	cos[0].clockCheck.Store(0)
	onTime.skew.Store(int64(-8 * time.Second))
	sync1(t, cos[0], Report{Demand: 100, InFlight: 4})
	s := sync1(t, cos[1], Report{Demand: 100, InFlight: 4})
	assert.Equal(t, 3, s.Members, "the stepped Governor's lease still runs")
}

// A Redis a round trip of well under the timeout away joins, at start and
// after a failure, however many commands joining takes.
func TestDistantRedisJoins(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	addr := srv.Delayed(t, 35*time.Millisecond) // a round trip of 70ms; the timeout is 200ms
	a := newCoordURL(t, "redis://"+addr, "a", nil, 20*time.Millisecond)
	require.True(t, a.Up(), "joined at start: %s", a.log.String())
	sync1(t, a, Report{Initial: 8})

	srv.Kill()
	_, err := a.Sync(context.Background(), []Report{{Lane: "l", Max: 8}})
	require.ErrorIs(t, err, ErrLocal)
	srv.Restart()
	require.Eventually(t, a.Up, 10*time.Second, 10*time.Millisecond, "rejoins")
	assert.Equal(t, 8.0, sync1(t, a, Report{Initial: 8}).Target)
}

// A record lost with its members (Redis restarted empty, FLUSHALL, its keys
// evicted) does not hand the first Governor back the whole target: the
// Governors it saw are taken as alive until their leases would have
// expired, as if the record had kept them.
func TestLostRecordKeepsTheMembersItHad(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 16, Demand: 100})
	sync1(t, b, Report{Demand: 100})
	s := sync1(t, a, Report{Demand: 100, InFlight: 8})
	require.Equal(t, 2, s.Members)
	require.Equal(t, 8, s.Share)

	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.FlushAll(context.Background()).Err())

	clk.Add(10 * time.Millisecond)
	s = sync1(t, a, Report{Initial: 16, Demand: 100, InFlight: 8})
	assert.Equal(t, 1, s.Members, "the record starts again with a alone")
	assert.Equal(t, 8, s.Share, "b, not yet back, keeps its part")
	assert.Equal(t, 8, s.Fair)
	s = sync1(t, b, Report{Initial: 16, Demand: 100, InFlight: 8})
	assert.Equal(t, 2, s.Members)
	assert.Equal(t, 8, s.Share)

	// b does not come back again: a takes its part once b's lease would
	// have expired (1s here).
	clk.Add(900 * time.Millisecond)
	assert.Equal(t, 8, sync1(t, a, Report{Demand: 100, InFlight: 8}).Share, "b's lease still runs")
	clk.Add(1200 * time.Millisecond)
	s = sync1(t, a, Report{Demand: 100, InFlight: 8})
	assert.Equal(t, 1, s.Members)
	assert.Equal(t, 16, s.Share, "b's lease is over")
}

// Governors configured with different maxima on one lane (a rollout that
// changes GOVERNOR_MAX_CONCURRENCY, or two teams' sidecars): each keeps to
// its own maximum, and the lowest does not bound the others.
func TestGovernorsWithDifferentMaxima(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	small, big := newCoord(t, srv, "small", clk), newCoord(t, srv, "big", clk)
	sync1(t, big, Report{Max: 64, Initial: 16, Demand: 100})
	sync1(t, small, Report{Max: 4, Demand: 100})
	for range 2 {
		s := sync1(t, small, Report{Max: 4, Demand: 100, InFlight: 4})
		assert.Equal(t, 16.0, s.Target, "the small maximum bounds only its own Governor")
		assert.Equal(t, 4, s.Share)
		assert.Equal(t, 4, s.Fair)
		s = sync1(t, big, Report{Max: 64, Demand: 100, InFlight: 12})
		assert.Equal(t, 16.0, s.Target)
		assert.Equal(t, 12, s.Share, "the rest goes to the Governor that can use it")
	}

	// The demands stay "demand,in flight", as older versions read them.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	_, _, demand, _, _ := keys("default/m/abc123")
	vals, err := admin.HVals(context.Background(), demand).Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"4,4", "64,12"}, vals)

	// The small Governor's controller, held at its maximum, cuts 4 to 3.6:
	// the shared target is cut by as much, not to 3.6.
	s := sync1(t, small, Report{Max: 4, Decreased: true, DecreaseTarget: 3.6, DecreaseDispatched: t0, DecreaseAt: t0,
		DecreaseLevel: 16, Demand: 100, InFlight: 4})
	assert.InDelta(t, 14.4, s.Target, 1e-9)
}

// Every key Governors write expires: a Governor that dies, or a lane no
// Governor uses any more, leaves nothing in Redis for good.
func TestEveryKeyExpires(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	a, b := newCoord(t, srv, "a", nil), newCoord(t, srv, "b", nil)
	ctx := context.Background()
	lane := "default/m/abc123"
	sync1(t, a, Report{Initial: 8, Demand: 4, Rate: 10, Burst: 5, PausedUntil: time.Now().Add(time.Second), PausedAt: time.Now()})
	sync1(t, b, Report{Demand: 4, Decreased: true, DecreaseTarget: 4, DecreaseDispatched: time.Now(), DecreaseAt: time.Now()})
	_, err := a.Reserve(ctx, lane, 10, 5)
	require.NoError(t, err)
	require.NoError(t, b.Leave(ctx, []string{lane}))

	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ks, err := admin.Keys(ctx, "*").Result()
	require.NoError(t, err)
	state, members, demand, synced, gcra := keys(lane)
	assert.Subset(t, ks, []string{state, members, demand, synced, gcra, maximaKey(lane)}, "the lane's keys")
	for _, k := range ks {
		ttl, err := admin.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0), "%s expires", k)
		assert.LessOrEqual(t, ttl, a.keyTTL(), "%s expires within the keys' TTL", k)
	}
}

// Many calls of a paced lane dispatched at once (a pause that ends, a
// burst) book the shared bucket in a few round trips, not one connection
// each: the bookings neither wait for one of the client's connections past
// the timeout nor switch the Governor to local mode.
func TestConcurrentBookingsShareRoundTrips(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	addr := srv.Delayed(t, 10*time.Millisecond) // a round trip of 20ms
	clk := &clock{t: t0}
	a := newCoordURL(t, "redis://"+addr, "a", clk.Now, 50*time.Millisecond)
	a.offset.Store(0)
	a.clockCheck.Store(math.MaxInt64)
	const calls = 300
	var wg sync.WaitGroup
	waits := make([]time.Duration, calls)
	errs := make([]error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waits[i], errs[i] = a.Reserve(context.Background(), "default/m/abc123", 100, 10)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "booking %d", i)
	}
	assert.True(t, a.Up(), "still coordinated")
	slices.Sort(waits)
	for i, w := range waits {
		// 100 a second with a burst of 10: the 11th waits 10ms, and so on.
		want := time.Duration(max(0, i+1-10)) * 10 * time.Millisecond
		require.Equal(t, want, w, "booking %d of %d at one instant", i, calls)
	}

	// A Redis that stops answering still switches to local mode at the
	// first booking, within the timeout.
	srv.Freeze()
	_, err := a.Reserve(context.Background(), "default/m/abc123", 100, 10)
	require.ErrorIs(t, err, ErrLocal)
	assert.False(t, a.Up())
	srv.Thaw()
}

// A record lost again and again (Redis evicting it under maxmemory) holds
// a part only for the Governors seen since the loss before: one that died
// meanwhile is given up a lease after the first loss.
func TestRecordLostAgainForgetsTheDead(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "a", clk), newCoord(t, srv, "b", clk)
	sync1(t, a, Report{Initial: 16, Demand: 100})
	sync1(t, b, Report{Demand: 100})
	require.Equal(t, 2, sync1(t, a, Report{Demand: 100, InFlight: 8}).Members)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := context.Background()

	// b dies as Redis loses the record; a alone keeps syncing.
	require.NoError(t, admin.FlushAll(ctx).Err())
	clk.Add(10 * time.Millisecond)
	assert.Equal(t, 8, sync1(t, a, Report{Initial: 16, Demand: 100, InFlight: 8}).Share, "b may be reconnecting")
	clk.Add(500 * time.Millisecond)
	require.NoError(t, admin.FlushAll(ctx).Err())
	assert.Equal(t, 8, sync1(t, a, Report{Initial: 16, Demand: 100, InFlight: 8}).Share, "still within b's lease")
	clk.Add(600 * time.Millisecond)
	assert.Equal(t, 16, sync1(t, a, Report{Demand: 100, InFlight: 8}).Share, "b not seen since the first loss: its lease is over")
}

// A Redis user that may not run one of the commands the scripts run (an
// ACL written by hand) is no Redis to coordinate over: the Coordinator
// does not join it, rather than joining and failing every sync.
func TestUserThatMayNotRunTheScriptsIsNotJoined(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := context.Background()
	all := scriptCommands()
	for _, missing := range all {
		t.Run(missing, func(t *testing.T) {
			rules := []any{"acl", "setuser", "u-" + missing, "on", ">pw", "~governor:*", "+@scripting", "+ping", "+time"}
			for _, c := range all {
				if c != missing {
					rules = append(rules, "+"+strings.ToLower(c))
				}
			}
			require.NoError(t, admin.Do(ctx, rules...).Err())
			a := newCoordURL(t, "redis://u-"+missing+":pw@"+srv.Addr(), "a", nil, 20*time.Millisecond)
			assert.False(t, a.Up(), "a user that may not run %s is not joined", missing)
		})
	}
	require.NoError(t, admin.Do(ctx, "acl", "setuser", "u-all", "on", ">pw", "~governor:*", "+@scripting", "+ping", "+time",
		"+hmget", "+hget", "+hset", "+hdel", "+hvals", "+zadd", "+zrem", "+zrange", "+zrangebyscore", "+pexpire", "+get", "+set").Err())
	a := newCoordURL(t, "redis://u-all:pw@"+srv.Addr(), "a", nil, 20*time.Millisecond)
	require.True(t, a.Up(), "the commands README lists are enough: %s", a.log.String())
	sync1(t, a, Report{Initial: 8, Demand: 4})
	_, err := a.Reserve(ctx, "default/m/abc123", 10, 1)
	require.NoError(t, err)
	require.NoError(t, a.Leave(ctx, []string{"default/m/abc123"}))
}

// scriptCommands are the commands the scripts run, read from their source.
func scriptCommands() []string {
	seen := map[string]bool{}
	for _, src := range []string{syncSource, gcraSource, leaveSource} {
		for _, m := range regexp.MustCompile(`redis\.call\('([A-Z]+)'`).FindAllStringSubmatch(src, -1) {
			seen[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Who gets the integer remainder of the shares turns at the same instants
// for Governors whose clocks are seconds apart: they agree on Redis's
// clock, so the shares they take sum to the limit.
func TestRemainderTurnsOnRedisClock(t *testing.T) {
	redisNow := time.Date(2026, 11, 23, 12, 0, 3, 0, time.UTC) // 3 s into a turn
	vals := []string{"13", "0", "0", "0", "0", "0", "0", "1", ""}
	for _, id := range []string{"a", "b", "c"} {
		vals = append(vals, id, "100,4", strconv.FormatInt(redisNow.UnixMilli(), 10))
	}
	total := 0
	for _, g := range []struct {
		id   string
		skew time.Duration // this host's clock less Redis's
	}{{"a", 0}, {"b", 5 * time.Second}, {"c", -5 * time.Second}} {
		co := &Coordinator{cfg: Config{Instance: g.id, LeaseTTL: time.Second}, recalled: map[string]recalled{}}
		off := -g.skew.Milliseconds()
		s, err := co.parseShared(Report{Lane: "l", Max: 64}, vals, redisNow.Add(g.skew), off)
		require.NoError(t, err)
		total += s.Share
	}
	assert.Equal(t, 13, total, "the three shares sum to the limit")
}

// Two Governors given the same GOVERNOR_INSTANCE count as one member: each
// takes that member's share. The first to see the other's sync under its
// name says so.
func TestSameInstanceTwiceIsLogged(t *testing.T) {
	leakcheck.Check(t)
	srv := redistest.Start(t)
	clk := &clock{t: t0}
	a, b := newCoord(t, srv, "dup", clk), newCoord(t, srv, "dup", clk)
	sync1(t, a, Report{Initial: 16, Demand: 100})
	clk.Add(10 * time.Millisecond)
	sync1(t, b, Report{Demand: 100})
	clk.Add(10 * time.Millisecond)
	sync1(t, a, Report{Demand: 100})
	assert.Contains(t, a.log.String(), "another governor syncs under this instance name")
	for range 3 {
		clk.Add(10 * time.Millisecond)
		sync1(t, b, Report{Demand: 100})
		sync1(t, a, Report{Demand: 100})
	}
	assert.Equal(t, 1, strings.Count(a.log.String(), "another governor"), "said once")

	// A Governor alone under its name, across a Redis restart, says nothing.
	c := newCoord(t, srv, "c", clk)
	sync1(t, c, Report{Demand: 1})
	srv.Restart()
	_, _ = c.Sync(context.Background(), []Report{{Lane: "default/m/abc123", Max: 64}}) // (may find the old connection closed)
	require.Eventually(t, c.Up, 5*time.Second, 10*time.Millisecond)
	clk.Add(10 * time.Millisecond)
	sync1(t, c, Report{Demand: 1})
	clk.Add(10 * time.Millisecond)
	sync1(t, c, Report{Demand: 1})
	assert.NotContains(t, c.log.String(), "another governor")
}
