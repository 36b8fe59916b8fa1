package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// call is one Acquire running in its own goroutine.
type call struct {
	name   string
	tenant string
	cancel context.CancelFunc
	done   chan error // receives Acquire's result
}

// start runs Acquire for p in a new goroutine and, inside a synctest
// bubble, waits until the call has either returned or is blocked in the
// queue, so that calls started one after another queue in that order.
func start(t *testing.T, q *Queue, name string, p Priority) *call {
	t.Helper()
	return startTenant(t, q, name, p)
}

// startTenant is start for a call of p.Tenant.
func startTenant(t *testing.T, q *Queue, name string, p Priority) *call {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c := &call{name: name, tenant: p.Tenant, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- q.Acquire(ctx, p) }()
	synctest.Wait()
	return c
}

// finished reports whether c's Acquire has returned, and its result.
func (c *call) finished() (error, bool) {
	select {
	case err := <-c.done:
		c.done <- err // keep it for the next look
		return err, true
	default:
		return nil, false
	}
}

// order releases one slot at a time and returns the names of the calls in
// the order they were granted. The caller holds the only slot (limit 1).
func order(t *testing.T, q *Queue, calls ...*call) []string {
	t.Helper()
	var got []string
	for range calls {
		q.ReleaseTenant("")
		synctest.Wait()
		granted := 0
		for _, c := range calls {
			if err, ok := c.finished(); ok && !contains(got, c.name) {
				require.NoError(t, err, "call %s", c.name)
				got = append(got, c.name)
				granted++
			}
		}
		require.Equal(t, 1, granted, "one Release grants one call; granted so far %v", got)
	}
	return got
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func fresh(u int) Priority { return Priority{Urgency: u} }
func retry(u int) Priority { return Priority{Urgency: u, Retry: true} }

func TestNewDefaults(t *testing.T) {
	q := New(Config{})
	s := q.Stats()
	assert.Equal(t, 1, s.Limit)
	assert.Equal(t, DefaultCapacity, q.capacity)
	assert.Equal(t, DefaultCapacity/10, q.reserve)

	assert.Equal(t, 1, New(Config{Capacity: 5}).reserve, "reserve is at least 1")
	assert.Equal(t, 0, New(Config{RetryReserve: -1}).reserve, "negative reserve means none")
	assert.Equal(t, 1, New(Config{Limit: -3}).Stats().Limit)
	assert.Panics(t, func() { New(Config{Capacity: -1}) })
}

func TestLimitRespected(t *testing.T) {
	q := New(Config{Limit: 2})
	assert.True(t, q.TryAcquire(fresh(3)))
	assert.True(t, q.TryAcquire(fresh(3)))
	assert.False(t, q.TryAcquire(fresh(0)), "third call over limit 2")
	assert.Equal(t, 2, q.Stats().InFlight)
	q.ReleaseTenant("")
	assert.True(t, q.TryAcquire(fresh(3)))
	q.ReleaseTenant("")
	q.ReleaseTenant("")
	assert.Equal(t, 0, q.Stats().InFlight)
	assert.Panics(t, func() { q.ReleaseTenant("") }, "Release without Acquire")
}

func TestLimitRespectedUnderLoad(t *testing.T) {
	const limit, workers, rounds = 3, 32, 200
	q := New(Config{Limit: limit})
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				p := Priority{Urgency: (w + i) % Urgencies, Retry: i%5 == 0}
				if !assert.NoError(t, q.Acquire(t.Context(), p)) {
					return
				}
				n := running.Add(1)
				for {
					m := peak.Load()
					if n <= m || peak.CompareAndSwap(m, n) {
						break
					}
				}
				running.Add(-1)
				q.ReleaseTenant("")
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(limit))
	assert.Equal(t, Stats{Limit: limit}, q.Stats())
}

func TestAcquireBlocksAtLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		c := start(t, q, "waiter", fresh(3))
		_, ok := c.finished()
		assert.False(t, ok, "Acquire returned while the only slot was held")
		assert.Equal(t, 1, q.Len())
		assert.False(t, q.TryAcquire(fresh(0)), "TryAcquire may not jump the queue")

		q.ReleaseTenant("")
		assert.NoError(t, <-c.done)
		assert.Equal(t, Stats{Limit: 1, InFlight: 1}, q.Stats())
		q.ReleaseTenant("")
	})
}

// AcquireAt reports when the slot was granted, by the queue's clock: for a
// call that waited, the instant of the Release or SetLimit that let it
// out, not the later one at which its goroutine runs again. The clock here
// moves one second at every reading, so a reading taken when the waiter
// wakes would show.
func TestAcquireAtReportsTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ticks atomic.Int64
		q := New(Config{Limit: 1, Now: func() time.Time { return time.Unix(ticks.Add(1), 0) }})
		at, err := q.AcquireAt(t.Context(), fresh(3))
		require.NoError(t, err)
		assert.Equal(t, time.Unix(1, 0), at, "a free slot: granted at once")

		type grant struct {
			at  time.Time
			err error
		}
		wait := func() chan grant {
			got := make(chan grant, 1)
			go func() {
				at, err := q.AcquireAt(t.Context(), fresh(3))
				got <- grant{at, err}
			}()
			synctest.Wait()
			return got
		}
		first, second := wait(), wait()
		require.Equal(t, 2, q.Len())
		q.ReleaseTenant("") // the clock's second reading
		g := <-first
		require.NoError(t, g.err)
		assert.Equal(t, time.Unix(2, 0), g.at, "granted by the Release")
		q.SetLimit(2) // the third
		g = <-second
		require.NoError(t, g.err)
		assert.Equal(t, time.Unix(3, 0), g.at, "granted by SetLimit")
		assert.Equal(t, int64(3), ticks.Load(), "one reading per grant, none when the waiter runs")

		// A waiter that leaves gets no grant time.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		at, err = q.AcquireAt(ctx, fresh(3))
		assert.ErrorIs(t, err, context.Canceled)
		assert.True(t, at.IsZero())
		q.ReleaseTenant("")
		q.ReleaseTenant("")
	})
}

func TestUrgencyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		calls := []*call{
			start(t, q, "u7-a", fresh(7)),
			start(t, q, "u7-b", fresh(7)),
			start(t, q, "u3", fresh(3)),
			start(t, q, "u7-c", fresh(7)),
			start(t, q, "u0", fresh(0)),
			start(t, q, "u-5 (clamped to 0)", fresh(-5)),
			start(t, q, "u99 (clamped to 7)", fresh(99)),
		}
		s := q.Stats()
		assert.Equal(t, 7, s.Waiting)
		assert.Equal(t, [Urgencies]int{0: 2, 3: 1, 7: 4}, s.WaitingByUrgency)

		got := order(t, q, calls...)
		assert.Equal(t, []string{"u0", "u-5 (clamped to 0)", "u3", "u7-a", "u7-b", "u7-c", "u99 (clamped to 7)"}, got)
		q.ReleaseTenant("")
	})
}

func TestFIFOWithinUrgency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		var calls []*call
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
		for _, n := range names {
			calls = append(calls, start(t, q, n, fresh(5)))
		}
		assert.Equal(t, names, order(t, q, calls...))
		q.ReleaseTenant("")
	})
}

func TestRetryAheadOfFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		calls := []*call{
			start(t, q, "fresh-u3-a", fresh(3)),
			start(t, q, "fresh-u3-b", fresh(3)),
			start(t, q, "retry-u5", retry(5)),
			start(t, q, "retry-u3-a", retry(3)),
			start(t, q, "fresh-u1", fresh(1)),
			start(t, q, "retry-u3-b", retry(3)),
		}
		got := order(t, q, calls...)
		assert.Equal(t, []string{
			"fresh-u1",   // more urgent than any retry of u3
			"retry-u3-a", // retries before fresh calls of their urgency, FIFO among them
			"retry-u3-b",
			"fresh-u3-a",
			"fresh-u3-b",
			"retry-u5", // a retry does not overtake more urgent calls
		}, got)
		q.ReleaseTenant("")
	})
}

func TestErrFullAndRetryReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1, Capacity: 2, RetryReserve: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		a := start(t, q, "a", fresh(3))
		b := start(t, q, "b", fresh(3))

		assert.ErrorIs(t, q.Acquire(t.Context(), fresh(3)), ErrFull, "fresh call beyond Capacity")
		r := start(t, q, "retry", retry(3))
		_, ok := r.finished()
		assert.False(t, ok, "a retry may use the reserve")
		assert.Equal(t, 3, q.Len())
		assert.ErrorIs(t, q.Acquire(t.Context(), retry(0)), ErrFull, "retry beyond Capacity+RetryReserve")

		assert.Equal(t, []string{"retry", "a", "b"}, order(t, q, a, b, r))
		q.ReleaseTenant("")
	})
}

// A fresh call that finds the queue full takes the place of a less urgent
// fresh call, which leaves with ErrFull: of the least urgent urgency, the
// newest call of the tenant with the most calls waiting there. Nothing
// less urgent waiting, it is refused.
func TestFullQueueTurnsAwayALessUrgentCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1, Capacity: 4, RetryReserve: -1})
		require.True(t, q.TryAcquire(fresh(3)))
		a1 := startTenant(t, q, "a1", Priority{Urgency: 5, Tenant: "a"})
		a2 := startTenant(t, q, "a2", Priority{Urgency: 5, Tenant: "a"})
		b1 := startTenant(t, q, "b1", Priority{Urgency: 5, Tenant: "b"})
		c1 := startTenant(t, q, "c1", Priority{Urgency: 4, Tenant: "c"})
		assert.ErrorIs(t, q.Acquire(t.Context(), Priority{Urgency: 5, Tenant: "x"}), ErrFull, "as urgent: refused")
		assert.ErrorIs(t, q.Acquire(t.Context(), fresh(7)), ErrFull, "less urgent: refused")
		assert.ErrorIs(t, q.Acquire(t.Context(), retry(0)), ErrFull, "a retry has its reserve, none here")

		turnedAway := func(c *call) {
			t.Helper()
			err, ok := c.finished()
			require.True(t, ok, "%s left the queue", c.name)
			assert.ErrorIs(t, err, ErrFull, c.name)
		}
		var urgent []*call
		for i, gone := range []*call{a2, a1, b1, c1} {
			urgent = append(urgent, start(t, q, fmt.Sprintf("u%d", i), fresh(3)))
			turnedAway(gone)
			assert.Equal(t, 4, q.Len())
		}
		assert.ErrorIs(t, q.Acquire(t.Context(), fresh(3)), ErrFull, "nothing less urgent left")
		assert.Equal(t, []string{"u0", "u1", "u2", "u3"}, order(t, q, urgent...))
		q.ReleaseTenant("")
		assert.Equal(t, Stats{Limit: 1}, q.Stats())
		assert.Empty(t, q.Tenants())
	})
}

func TestNoRetryReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1, Capacity: 1, RetryReserve: -1})
		require.True(t, q.TryAcquire(fresh(3)))
		a := start(t, q, "a", fresh(3))
		assert.ErrorIs(t, q.Acquire(t.Context(), retry(3)), ErrFull)
		q.ReleaseTenant("")
		require.NoError(t, <-a.done)
		q.ReleaseTenant("")
	})
}

func TestCancelLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		a := start(t, q, "a", fresh(3))
		b := start(t, q, "b", fresh(1))
		c := start(t, q, "c", fresh(3))
		d := start(t, q, "d", fresh(3))
		require.Equal(t, 4, q.Len())

		b.cancel() // the head of the queue
		assert.ErrorIs(t, <-b.done, context.Canceled)
		assert.Equal(t, 3, q.Len(), "the waiter left when Acquire returned")
		c.cancel() // one in the middle
		assert.ErrorIs(t, <-c.done, context.Canceled)
		s := q.Stats()
		assert.Equal(t, 2, s.Waiting)
		assert.Equal(t, [Urgencies]int{3: 2}, s.WaitingByUrgency)
		assert.Equal(t, 1, s.InFlight, "a cancelled waiter takes no slot")

		assert.Equal(t, []string{"a", "d"}, order(t, q, a, d))
		q.ReleaseTenant("")
		assert.Equal(t, Stats{Limit: 1}, q.Stats())
	})
}

func TestAcquireWithEndedContext(t *testing.T) {
	q := New(Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, q.Acquire(ctx, fresh(3)), context.Canceled, "a free slot is not taken for a caller that left")
	assert.Equal(t, 0, q.Stats().InFlight)
}

func TestDeadlineWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		begin := time.Now()
		assert.ErrorIs(t, q.Acquire(ctx, fresh(3)), context.DeadlineExceeded)
		assert.Equal(t, 10*time.Second, time.Since(begin))
		assert.Equal(t, 0, q.Len())
		q.ReleaseTenant("")
	})
}

// TestGrantedAfterCancel builds the race deterministically: the waiter has
// seen its context end and is about to leave, and just then Release grants
// it the slot. The slot must go to the next waiter, not leak.
func TestGrantedAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		var raced atomic.Bool
		q.testHookCancel = func() {
			if raced.CompareAndSwap(false, true) {
				q.ReleaseTenant("") // grants the cancelled waiter, still at the head
			}
		}
		a := start(t, q, "a", fresh(0))
		b := start(t, q, "b", fresh(3))

		a.cancel()
		assert.ErrorIs(t, <-a.done, context.Canceled)
		require.True(t, raced.Load(), "the hook ran")
		assert.NoError(t, <-b.done, "the slot given back went to the next waiter")
		assert.Equal(t, Stats{Limit: 1, InFlight: 1}, q.Stats())
		q.ReleaseTenant("")
		assert.Equal(t, Stats{Limit: 1}, q.Stats())
	})
}

// TestReleaseAndCancelAtOnce lets the scheduler pick which of the grant and
// the cancel the waiter sees first, many times over; either way the caller
// that left holds no slot and the next waiter gets it.
func TestReleaseAndCancelAtOnce(t *testing.T) {
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			q := New(Config{Limit: 1})
			require.True(t, q.TryAcquire(fresh(3)))
			a := start(t, q, "a", fresh(3))
			b := start(t, q, "b", fresh(3))

			q.ReleaseTenant("")
			a.cancel()
			synctest.Wait()

			errA := <-a.done
			if errA == nil {
				// a won the slot before it saw the cancel; it is a's.
				assert.Equal(t, Stats{Limit: 1, InFlight: 1, Waiting: 1, WaitingByUrgency: [Urgencies]int{3: 1}}, q.Stats())
				q.ReleaseTenant("")
			} else {
				assert.ErrorIs(t, errA, context.Canceled)
			}
			require.NoError(t, <-b.done)
			assert.Equal(t, Stats{Limit: 1, InFlight: 1}, q.Stats())
			q.ReleaseTenant("")
		})
	}
}

func TestSetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		a := start(t, q, "a", fresh(3))
		b := start(t, q, "b", fresh(3))
		c := start(t, q, "c", fresh(3))

		q.SetLimit(3) // up: two waiters are granted at once, no Release needed
		require.NoError(t, <-a.done)
		require.NoError(t, <-b.done)
		_, ok := c.finished()
		assert.False(t, ok)
		assert.Equal(t, 3, q.Stats().InFlight)

		q.SetLimit(1) // down: nobody in flight is preempted
		s := q.Stats()
		assert.Equal(t, 1, s.Limit)
		assert.Equal(t, 3, s.InFlight)

		q.ReleaseTenant("")
		q.ReleaseTenant("")
		synctest.Wait()
		_, ok = c.finished()
		assert.False(t, ok, "no grant until fewer than the new limit are in flight")
		q.ReleaseTenant("")
		require.NoError(t, <-c.done)
		q.ReleaseTenant("")

		q.SetLimit(-1)
		assert.Equal(t, 0, q.Stats().Limit, "limits below 0 mean 0")
	})
}

// A limit of 0 grants nothing, however long the calls wait, until it is
// raised; Close still answers the calls waiting.
func TestSetLimitZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 2})
		q.SetLimit(0)
		assert.False(t, q.TryAcquire(fresh(3)), "no slot at a limit of 0")
		a := start(t, q, "a", fresh(3))
		time.Sleep(time.Hour)
		synctest.Wait()
		_, ok := a.finished()
		assert.False(t, ok, "a limit of 0 ends at no set time")

		q.SetLimit(1)
		require.NoError(t, <-a.done, "raising it grants the call waiting")
		q.SetLimit(0)
		b := start(t, q, "b", fresh(3))
		q.ReleaseTenant("")
		synctest.Wait()
		_, ok = b.finished()
		assert.False(t, ok, "a slot freed at a limit of 0 goes to no one")

		q.Close()
		assert.ErrorIs(t, <-b.done, ErrClosed)
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		var calls []*call
		for u := range Urgencies {
			calls = append(calls, start(t, q, "", fresh(u)), start(t, q, "", retry(u)))
		}
		q.PauseUntil(time.Now().Add(time.Hour))

		q.Close()
		for i, c := range calls {
			assert.ErrorIs(t, <-c.done, ErrClosed, "waiter %d", i)
		}
		assert.Equal(t, Stats{Limit: 1, InFlight: 1}, q.Stats(), "in-flight calls are not affected; the pause is over")
		assert.False(t, q.timer.Stop(), "Close stopped the pause timer")

		assert.ErrorIs(t, q.Acquire(t.Context(), fresh(0)), ErrClosed)
		assert.False(t, q.TryAcquire(fresh(0)))
		q.ReleaseTenant("") // the call in flight finishes after Close
		assert.ErrorIs(t, q.Acquire(t.Context(), fresh(0)), ErrClosed, "even with a free slot")
		q.Close() // twice is fine
	})
}

func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.NoError(t, q.Drain(t.Context()), "an idle queue is drained")

		require.True(t, q.TryAcquire(fresh(3)))
		a := start(t, q, "a", fresh(3))
		drained := make(chan error, 2)
		go func() { drained <- q.Drain(t.Context()) }()
		go func() { drained <- q.Drain(t.Context()) }()

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		assert.ErrorIs(t, q.Drain(ctx), context.DeadlineExceeded)

		q.ReleaseTenant("") // a runs
		require.NoError(t, <-a.done)
		synctest.Wait()
		assert.Empty(t, drained, "a is still in flight")
		q.ReleaseTenant("")
		assert.NoError(t, <-drained)
		assert.NoError(t, <-drained)
	})
}

func TestDrainEndsWhenLastWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		q.PauseUntil(time.Now().Add(time.Hour))
		a := start(t, q, "a", fresh(3))
		drained := make(chan error, 1)
		go func() { drained <- q.Drain(t.Context()) }()
		synctest.Wait()
		assert.Empty(t, drained)
		a.cancel()
		assert.ErrorIs(t, <-a.done, context.Canceled)
		assert.NoError(t, <-drained)
		q.Close()
	})
}

func TestDrainEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		q.PauseUntil(time.Now().Add(time.Hour))
		a := start(t, q, "a", fresh(3))
		drained := make(chan error, 1)
		go func() { drained <- q.Drain(t.Context()) }()
		synctest.Wait()
		q.Close()
		assert.ErrorIs(t, <-a.done, ErrClosed)
		assert.NoError(t, <-drained)
	})
}

// TestNoGoroutineLeak mixes every way a call can end — granted, cancelled,
// timed out, full, closed — with a pause in progress. synctest.Test fails
// if any goroutine of the bubble is still blocked when it ends, and the
// waiters here use contexts that never end by themselves, so each must
// have been answered by the queue. The package starts no goroutine of its
// own; the pause timer is stopped by Close.
func TestNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 2, Capacity: 10, RetryReserve: -1})
		var wg sync.WaitGroup
		results := make(chan error, 64)
		for i := range 30 {
			ctx := context.Background()
			var cancel context.CancelFunc = func() {}
			switch i % 3 {
			case 1:
				ctx, cancel = context.WithCancel(ctx)
			case 2:
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i)*time.Second)
			}
			defer cancel()
			wg.Go(func() {
				err := q.Acquire(ctx, Priority{Urgency: i % Urgencies, Retry: i%4 == 0})
				if err == nil {
					q.ReleaseTenant("")
				}
				results <- err
			})
			synctest.Wait() // fix the arrival order
			if i == 10 {
				q.PauseUntil(time.Now().Add(time.Minute))
			}
			if i%3 == 1 && i%2 == 0 {
				cancel()
			}
		}
		<-time.After(20 * time.Second) // on the fake clock: the first timeouts expire, the pause holds
		q.Close()
		wg.Wait()
		close(results)
		seen := map[error]int{}
		for err := range results {
			seen[err]++
		}
		assert.Positive(t, seen[nil], "granted: %v", seen)
		assert.Positive(t, seen[ErrClosed], "closed: %v", seen)
		assert.Positive(t, seen[context.DeadlineExceeded], "timed out: %v", seen)
		assert.Positive(t, seen[context.Canceled], "cancelled: %v", seen)
		assert.Positive(t, seen[ErrFull], "full: %v", seen)
		assert.Equal(t, Stats{Limit: 2}, q.Stats())
	})
}
