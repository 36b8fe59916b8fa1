package queue

import "time"

// PauseUntil grants no slot before t, typically because the provider
// answered with Retry-After. Calls may still queue meanwhile, and calls in
// flight are not affected. A pause is only ever extended: while paused, an
// earlier t is ignored. When t comes, waiting calls are granted by a timer,
// without anyone calling ReleaseTenant; but if calls are still in flight
// then, only one is granted, and the others wait until a call in flight
// ends while the queue is not paused (ReleaseTenant), no call is in
// flight, or Resume. A call released during a pause is taken for one the
// provider refused (the caller pauses before it releases a refused call's
// slot), which frees nothing: if the one call let out is refused, the next
// pause's end lets out none. A t that is not in the future, or a closed
// queue, makes PauseUntil do nothing.
//
// The provider said it was full, and the calls it was running when it said
// so are still running: nothing this queue can see has freed a slot since.
// One call asks again; all of them asking would draw as many refusals, and
// asking again at every pause's end while the same calls run, a refusal
// each time. (So TCP sends one segment when its retransmission timer
// fires, RFC 5681 §3.1.)
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
	switch {
	case q.inFlight == 0:
		q.holding = false
	case !q.holding:
		q.holding, q.probe = true, true
	}
	q.grantWaitingLocked()
}

// Resume ends a pause, or the wait for a call in flight to end after one,
// now: waiting calls are granted the free slots at once. It does nothing
// when the queue is neither paused nor holding.
func (q *Queue) Resume() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.paused && !q.holding {
		return
	}
	q.paused, q.holding = false, false
	q.pausedUntil = time.Time{}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.grantWaitingLocked()
}
