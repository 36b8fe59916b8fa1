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
