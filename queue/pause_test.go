package queue

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPauseUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 2})
		require.True(t, q.TryAcquire(fresh(3)))
		begin := time.Now()
		until := begin.Add(30 * time.Second)
		q.PauseUntil(until)
		assert.Equal(t, until, q.Stats().PausedUntil)

		assert.False(t, q.TryAcquire(fresh(0)), "a free slot is not granted during a pause")
		a := start(t, q, "a", fresh(3))
		b := start(t, q, "b", fresh(3))
		q.ReleaseTenant("") // frees a second slot; still paused
		synctest.Wait()
		_, ok := a.finished()
		assert.False(t, ok, "granted during the pause")

		// Nobody calls Release: the pause ends by itself, at the time set.
		require.NoError(t, <-a.done)
		assert.Equal(t, 30*time.Second, time.Since(begin))
		require.NoError(t, <-b.done)
		assert.Equal(t, Stats{Limit: 2, InFlight: 2}, q.Stats())
		q.ReleaseTenant("")
		q.ReleaseTenant("")
	})
}

func TestPauseKeepsLaterTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		begin := time.Now()
		q.PauseUntil(begin.Add(10 * time.Second))
		q.PauseUntil(begin.Add(20 * time.Second)) // extends
		q.PauseUntil(begin.Add(5 * time.Second))  // ignored: earlier
		q.PauseUntil(begin.Add(-time.Second))     // ignored: past
		assert.Equal(t, begin.Add(20*time.Second), q.Stats().PausedUntil)

		a := start(t, q, "a", fresh(3))
		require.NoError(t, <-a.done)
		assert.Equal(t, 20*time.Second, time.Since(begin))
		assert.True(t, q.Stats().PausedUntil.IsZero())
		q.ReleaseTenant("")

		// A new pause after the last one ended.
		q.PauseUntil(time.Now().Add(time.Second))
		b := start(t, q, "b", fresh(3))
		require.NoError(t, <-b.done)
		assert.Equal(t, 21*time.Second, time.Since(begin))
		q.ReleaseTenant("")
	})
}

// TestPauseWithOwnClock checks that the deadline is measured on
// Config.Now: when that clock is set back during a pause, the timer fires
// before the clock reaches the deadline, and the pause goes on until it
// does.
func TestPauseWithOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var offset atomic.Int64 // how far q's clock is ahead of the timers'
		q := New(Config{Limit: 1, Now: func() time.Time {
			return time.Now().Add(time.Duration(offset.Load()))
		}})
		begin := time.Now()
		q.PauseUntil(begin.Add(10 * time.Second))
		offset.Store(int64(-5 * time.Second))

		a := start(t, q, "a", fresh(3))
		require.NoError(t, <-a.done)
		assert.Equal(t, 15*time.Second, time.Since(begin), "the pause ends when q's clock says so")
		q.ReleaseTenant("")
	})
}

func TestPauseInThePast(t *testing.T) {
	q := New(Config{})
	q.PauseUntil(time.Now().Add(-time.Second))
	assert.True(t, q.Stats().PausedUntil.IsZero())
	assert.True(t, q.TryAcquire(fresh(3)))
	q.ReleaseTenant("")
}

func TestPauseAfterClose(t *testing.T) {
	q := New(Config{})
	q.Close()
	q.PauseUntil(time.Now().Add(time.Hour))
	assert.True(t, q.Stats().PausedUntil.IsZero())
	assert.Nil(t, q.timer, "no timer for a closed queue")
}

func TestResumeEndsAPauseEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		begin := time.Now()
		q.PauseUntil(begin.Add(30 * time.Second))
		a := start(t, q, "a", fresh(3))
		synctest.Wait()
		_, ok := a.finished()
		require.False(t, ok, "granted during the pause")

		time.Sleep(time.Second) // the fake clock of the bubble
		q.Resume()
		require.NoError(t, <-a.done)
		assert.Equal(t, time.Second, time.Since(begin), "granted when the pause was lifted")
		assert.True(t, q.Stats().PausedUntil.IsZero())

		q.Resume() // not paused: nothing happens
		q.ReleaseTenant("")
		assert.True(t, q.TryAcquire(fresh(3)))
		q.ReleaseTenant("")
	})
}

// TestPauseEndsWithCallsInFlight checks what a pause that ends while calls
// are still in flight lets out: one call, and the others only once a call
// in flight has ended. Under a concurrency cap the calls the provider was
// running when it refused are still running: one call asking again is
// enough to learn whether a slot has freed, where all of them would draw
// as many refusals.
func TestPauseEndsWithCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 4})
		require.True(t, q.TryAcquire(fresh(3)), "a call in flight")
		begin := time.Now()
		q.PauseUntil(begin.Add(time.Second))
		a := start(t, q, "a", retry(3))
		b := start(t, q, "b", retry(3))
		c := start(t, q, "c", fresh(3))

		require.NoError(t, <-a.done, "one call goes when the pause ends")
		assert.Equal(t, time.Second, time.Since(begin))
		synctest.Wait()
		for _, w := range []*call{b, c} {
			_, ok := w.finished()
			assert.False(t, ok, "%s: granted before a call in flight ended", w.name)
		}
		assert.False(t, q.TryAcquire(fresh(0)), "no slot beside the one let out")
		assert.Equal(t, 2, q.Stats().InFlight)

		time.Sleep(3 * time.Second) // nothing ends: the queue keeps holding
		synctest.Wait()
		_, ok := b.finished()
		assert.False(t, ok, "granted while no call in flight ended")

		q.ReleaseTenant("") // the call that was in flight ends
		require.NoError(t, <-b.done)
		require.NoError(t, <-c.done)
		assert.Equal(t, Stats{Limit: 4, InFlight: 3}, q.Stats())
		assert.True(t, q.TryAcquire(fresh(3)), "open again: up to the limit")
		for range 4 {
			q.ReleaseTenant("")
		}
	})
}

// TestPauseEndsWithCallsInFlightNoneWaiting checks that the one call a
// pause's end lets out may come after it, and that Resume opens the queue
// again at once.
func TestPauseEndsWithCallsInFlightNoneWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 4})
		require.True(t, q.TryAcquire(fresh(3)))
		q.PauseUntil(time.Now().Add(time.Second))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.True(t, q.Stats().PausedUntil.IsZero(), "the pause is over")
		assert.True(t, q.TryAcquire(fresh(3)), "the one call after the pause")
		assert.False(t, q.TryAcquire(fresh(3)), "no second before a call in flight ends")

		q.Resume()
		assert.True(t, q.TryAcquire(fresh(3)), "Resume ends the wait")
		assert.True(t, q.TryAcquire(fresh(3)))
		assert.Equal(t, 4, q.Stats().InFlight)
		for range 4 {
			q.ReleaseTenant("")
		}
	})
}

// TestPauseEndsAgainWhileTheSameCallsRun checks that once the call a
// pause's end let out is refused (a pause, then its release), the next
// pause's end lets out none while the calls that were in flight still
// run: nothing has freed a slot since the first refusal. A call that ends
// outside a pause opens the queue again, and so does the end of the last
// call in flight, whenever it comes.
func TestPauseEndsAgainWhileTheSameCallsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 4})
		require.True(t, q.TryAcquire(fresh(3)), "a call in flight, the provider's only slot")
		q.PauseUntil(time.Now().Add(time.Second))
		a := start(t, q, "a", retry(3))
		b := start(t, q, "b", retry(3))
		require.NoError(t, <-a.done, "one call goes when the pause ends")

		// a is refused: the caller pauses, then releases its slot.
		begin := time.Now()
		q.PauseUntil(begin.Add(time.Second))
		q.ReleaseTenant("")
		a = start(t, q, "a", retry(3))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		for _, w := range []*call{a, b} {
			_, ok := w.finished()
			assert.False(t, ok, "%s: granted while the call in flight still runs", w.name)
		}
		assert.Equal(t, 1, q.Stats().InFlight)
		assert.True(t, q.Stats().PausedUntil.IsZero(), "the pause is over; the queue holds")

		q.ReleaseTenant("") // the call in flight ends, outside a pause
		require.NoError(t, <-a.done)
		require.NoError(t, <-b.done)
		q.ReleaseTenant("")
		q.ReleaseTenant("")

		// The last call in flight ends during a pause (refused, or failed):
		// nothing runs, so nothing holds the queue when the pause ends.
		require.True(t, q.TryAcquire(fresh(3)))
		q.PauseUntil(time.Now().Add(time.Second))
		c := start(t, q, "c", retry(3))
		require.NoError(t, <-c.done)
		q.PauseUntil(time.Now().Add(time.Second))
		q.ReleaseTenant("") // c, refused
		q.ReleaseTenant("") // the other, during the pause
		c = start(t, q, "c", retry(3))
		d := start(t, q, "d", fresh(3))
		require.NoError(t, <-c.done)
		require.NoError(t, <-d.done)
		assert.Equal(t, 2, q.Stats().InFlight, "both go at the pause's end")
		q.ReleaseTenant("")
		q.ReleaseTenant("")
	})
}
