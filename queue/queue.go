package queue

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

var (
	// ErrFull is returned by Acquire when the queue already holds as many
	// waiting calls as it may.
	ErrFull = errors.New("queue: full")
	// ErrClosed is returned by Acquire after Close, and to every call that
	// was still waiting when Close was called.
	ErrClosed = errors.New("queue: closed")
)

// DefaultCapacity is the number of waiting calls a queue holds when
// Config.Capacity is 0.
const DefaultCapacity = 10000

// Config configures a Queue. The zero value is a queue of DefaultCapacity
// waiting calls, a retry reserve of a tenth of that, a limit of one call in
// flight, and the real clock.
type Config struct {
	// Capacity is the largest number of fresh calls that may wait at once;
	// Acquire returns ErrFull beyond it. 0 means DefaultCapacity (10000).
	// A negative Capacity panics in New.
	Capacity int

	// RetryReserve is the number of extra waiting places that only retries
	// (Priority.Retry) may use: a retry is refused only when Capacity +
	// RetryReserve calls are waiting. A retried call was accepted once
	// already; the reserve keeps a queue full of fresh calls from turning
	// it into a lost call, while memory stays bounded. 0 means Capacity/10
	// (at least 1); a negative value means no reserve.
	RetryReserve int

	// Limit is the initial number of calls that may be in flight at once;
	// values below 1 mean 1. Change it later with SetLimit.
	Limit int

	// Now is the clock against which PauseUntil measures its deadline,
	// and that AcquireAt reads the grant from; nil means time.Now. The end
	// of a pause is detected by a runtime timer, so Now must advance with
	// real time (or with the fake clock of testing/synctest).
	Now func() time.Time
}

// A Queue hands out the in-flight slots of one lane to waiting calls, most
// urgent first, retries ahead of fresh calls of the same urgency, and first
// in, first out after that. Create it with New; the zero value is not
// usable. A Queue is safe for concurrent use by multiple goroutines.
type Queue struct {
	mu sync.Mutex

	capacity int // fresh calls that may wait
	reserve  int // further places for retries only
	now      func() time.Time

	limit     int
	inFlight  int
	waiters   waitHeap
	byUrgency [Urgencies]int
	seq       uint64 // arrival counter, the FIFO part of the heap key
	closed    bool

	// paused is true from PauseUntil until pausedUntil has passed; the
	// fast path reads the flag, not the clock.
	paused      bool
	pausedUntil time.Time
	timer       *time.Timer // ends the pause; created on first PauseUntil

	// idle, when not nil, is closed as soon as nothing waits or runs; see
	// Drain.
	idle chan struct{}

	// pool recycles waiters and their channels, so that waiting does not
	// allocate. It is per queue (not per package) so that a queue used
	// inside a testing/synctest bubble keeps its channels in that bubble.
	pool sync.Pool

	// testHookCancel, when set by a test, runs when a cancelled Acquire is
	// about to take the lock to leave the queue.
	testHookCancel func()
}

// New returns a Queue configured by cfg.
func New(cfg Config) *Queue {
	if cfg.Capacity < 0 {
		panic("queue: negative Capacity")
	}
	q := &Queue{
		capacity: cfg.Capacity,
		reserve:  cfg.RetryReserve,
		limit:    max(cfg.Limit, 1),
		now:      cfg.Now,
	}
	if q.capacity == 0 {
		q.capacity = DefaultCapacity
	}
	switch {
	case q.reserve == 0:
		q.reserve = max(q.capacity/10, 1)
	case q.reserve < 0:
		q.reserve = 0
	}
	if q.now == nil {
		q.now = time.Now
	}
	q.pool.New = func() any { return &waiter{index: -1, ready: make(chan error, 1)} }
	return q
}

// Acquire waits for an in-flight slot for a call of priority p and returns
// nil once it holds one; the caller must then call Release when the call is
// done.
//
// A slot is granted when fewer calls than the limit are in flight, the queue
// is not paused, and no waiting call goes before this one: calls go in
// order of urgency (0 first), then retries before fresh calls, then first
// in, first out. An urgency outside 0..7 is clamped into it.
//
// Acquire returns ErrFull at once when Capacity calls are waiting (for a
// retry: Capacity + RetryReserve), ErrClosed when the queue is closed, and
// ctx.Err() when ctx ends first, even if a slot is free. A call whose ctx
// ends while it waits leaves the queue at once; if a slot was granted to it
// at the same moment, the slot goes to the next waiting call.
func (q *Queue) Acquire(ctx context.Context, p Priority) error {
	_, err := q.AcquireAt(ctx, p)
	return err
}

// AcquireAt is Acquire that also returns when the slot was granted, by the
// queue's clock (Config.Now). A call that waited is granted its slot by
// the Release, SetLimit or end of a pause that lets it out, and goes on
// only once its goroutine runs again: a controller that asks under which
// limit a call was let out needs the first instant, since the limit may
// change in between.
func (q *Queue) AcquireAt(ctx context.Context, p Priority) (time.Time, error) {
	done := ctx.Done()
	if done != nil {
		select {
		case <-done:
			return time.Time{}, ctx.Err()
		default:
		}
	}

	w, granted, err := q.enqueue(p)
	if w == nil {
		return granted, err
	}
	select {
	case err := <-w.ready:
		granted = w.granted
		q.pool.Put(w)
		if err == nil && done != nil {
			// Granted, but the caller may have left at the same moment:
			// prefer the cancellation, as semaphore.Weighted does.
			select {
			case <-done:
				q.Release()
				return time.Time{}, ctx.Err()
			default:
			}
		}
		return granted, err

	case <-done:
		q.leave(w)
		return time.Time{}, ctx.Err()
	}
}

// enqueue grants a slot to a call of priority p at once (nil, when,
// nil), puts it in the queue (w, zero, nil), or refuses it (nil, zero,
// ErrClosed or ErrFull). (AcquireAt's frame stays on the stack while the
// call waits; this one does not.)
//
//go:noinline
func (q *Queue) enqueue(p Priority) (*waiter, time.Time, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, time.Time{}, ErrClosed
	}
	if q.grantableLocked() {
		q.inFlight++
		q.mu.Unlock()
		return nil, q.now(), nil
	}
	room := q.capacity
	if p.Retry {
		room += q.reserve
	}
	if len(q.waiters) >= room {
		q.mu.Unlock()
		return nil, time.Time{}, ErrFull
	}
	u := clampUrgency(p.Urgency)
	w := q.pool.Get().(*waiter)
	w.key = makeKey(u, p.Retry, q.seq)
	q.seq++
	heap.Push(&q.waiters, w)
	q.byUrgency[u]++
	q.mu.Unlock()
	return w, time.Time{}, nil
}

// leave takes w, whose caller has gone, out of the queue.
//
//go:noinline
func (q *Queue) leave(w *waiter) {
	if q.testHookCancel != nil {
		q.testHookCancel()
	}
	q.mu.Lock()
	if w.index >= 0 {
		// Still waiting: leave. No slot is free while anyone waits
		// (see grantLocked), so no one else can be granted now.
		heap.Remove(&q.waiters, w.index)
		q.byUrgency[w.urgency()]--
	} else if err := <-w.ready; err == nil {
		// Granted after the cancel: give the slot back.
		q.inFlight--
		q.grantLocked()
	}
	q.notifyIdleLocked()
	q.mu.Unlock()
	q.pool.Put(w)
}

// TryAcquire takes an in-flight slot if one can be granted at once to a call
// of priority p, without waiting, and reports whether it did. A true result
// must be followed by Release. It never takes a slot ahead of a waiting
// call; since a slot is free only while no call waits, p does not change
// the answer today and is taken for symmetry with Acquire.
func (q *Queue) TryAcquire(p Priority) bool {
	q.mu.Lock()
	ok := !q.closed && q.grantableLocked()
	if ok {
		q.inFlight++
	}
	q.mu.Unlock()
	return ok
}

// Release ends one in-flight call and grants its slot, and any other free
// slot, to the next waiting calls. Calling Release more often than slots
// were acquired is a bug in the caller and panics, as in
// semaphore.Weighted. Release may be called after Close.
func (q *Queue) Release() {
	q.mu.Lock()
	if q.inFlight <= 0 {
		q.mu.Unlock()
		panic("queue: Release without a matching Acquire")
	}
	q.inFlight--
	q.grantLocked()
	q.notifyIdleLocked()
	q.mu.Unlock()
}

// SetLimit sets the number of calls that may be in flight at once; n < 1
// means 1. Raising the limit grants waiting calls at once. Lowering it
// preempts nothing: calls already in flight finish, and no call is granted
// until fewer than n are in flight.
func (q *Queue) SetLimit(n int) {
	q.mu.Lock()
	q.limit = max(n, 1)
	q.grantLocked()
	q.mu.Unlock()
}

// Close refuses all further calls: every call still waiting returns
// ErrClosed, and so does every later Acquire. Calls in flight are not
// affected and still call Release. Close stops the pause timer. Calling
// Close more than once does nothing.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.paused = false
	if q.timer != nil {
		q.timer.Stop()
	}
	for i, w := range q.waiters {
		w.index = -1
		w.ready <- ErrClosed
		q.waiters[i] = nil
	}
	q.waiters = nil
	q.byUrgency = [Urgencies]int{}
	q.notifyIdleLocked()
}

// Drain waits until no call is waiting or in flight, or until ctx ends, and
// returns ctx.Err() in that case. It does not refuse new calls: a graceful
// shutdown stops the sources of fresh calls, drains (retries of calls in
// flight may still queue meanwhile), then closes.
func (q *Queue) Drain(ctx context.Context) error {
	q.mu.Lock()
	if q.inFlight == 0 && len(q.waiters) == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()

	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats is a snapshot of a Queue.
type Stats struct {
	Limit    int // calls that may be in flight at once
	InFlight int // calls in flight; may exceed Limit after SetLimit lowered it
	Waiting  int // calls waiting for a slot
	// WaitingByUrgency counts the waiting calls of each urgency.
	WaitingByUrgency [Urgencies]int
	// PausedUntil is the end of the current pause, or the zero time when
	// the queue is not paused.
	PausedUntil time.Time
}

// Stats returns a snapshot of the queue's state.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := Stats{
		Limit:            q.limit,
		InFlight:         q.inFlight,
		Waiting:          len(q.waiters),
		WaitingByUrgency: q.byUrgency,
	}
	if q.paused {
		s.PausedUntil = q.pausedUntil
	}
	return s
}

// Len returns the number of calls waiting for a slot.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

// grantableLocked reports whether a new call may take a slot at once.
// It requires q.mu to be held.
func (q *Queue) grantableLocked() bool {
	return !q.paused && q.inFlight < q.limit && len(q.waiters) == 0
}

// grantLocked hands free slots to waiting calls in heap order. Afterwards
// either no call waits, or no slot is free (the queue is paused or full):
// the rest of the package relies on that. It requires q.mu to be held.
func (q *Queue) grantLocked() {
	var now time.Time
	for !q.paused && q.inFlight < q.limit && len(q.waiters) > 0 {
		w := heap.Pop(&q.waiters).(*waiter)
		q.byUrgency[w.urgency()]--
		q.inFlight++
		if now.IsZero() {
			now = q.now()
		}
		w.granted = now
		w.ready <- nil // room for one answer: never blocks
	}
}

// notifyIdleLocked wakes Drain callers once nothing waits or runs.
// It requires q.mu to be held.
func (q *Queue) notifyIdleLocked() {
	if q.idle != nil && q.inFlight == 0 && len(q.waiters) == 0 {
		close(q.idle)
		q.idle = nil
	}
}

func clampUrgency(u int) int {
	return min(max(u, 0), Urgencies-1)
}
