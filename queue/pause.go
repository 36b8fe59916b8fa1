package queue

import "time"

// PauseUntil grants no slot before t, typically because the provider
// answered with Retry-After. Calls may still queue meanwhile, and calls in
// flight are not affected. A pause is only ever extended: while paused, an
// earlier t is ignored. When t comes, waiting calls are granted by a timer,
// without anyone calling ReleaseTenant. A t that is not in the future, or a
// closed queue, makes PauseUntil do nothing.
func (q *Queue) PauseUntil(t time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || (q.paused && !t.After(q.pausedUntil)) {
		return
	}
	d := t.Sub(q.now())
	if d <= 0 {
		return
	}
	q.paused = true
	q.pausedUntil = t
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.resume)
	} else {
		q.timer.Reset(d)
	}
}

// resume runs on the pause timer's goroutine and ends the pause if its time
// has come. The timer may fire early for the current deadline: a firing
// that raced with PauseUntil extending the pause, or a clock that is not
// the timer's. It then re-arms the timer for what remains.
func (q *Queue) resume() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.paused { // closed, or already resumed
		return
	}
	if d := q.pausedUntil.Sub(q.now()); d > 0 {
		q.timer.Reset(d)
		return
	}
	q.paused = false
	q.pausedUntil = time.Time{}
	q.grantWaitingLocked()
}

// Resume ends a pause now: waiting calls are granted the free slots at once.
// It does nothing when the queue is not paused.
func (q *Queue) Resume() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.paused {
		return
	}
	q.paused = false
	q.pausedUntil = time.Time{}
	q.timer.Stop()
	q.grantWaitingLocked()
}
