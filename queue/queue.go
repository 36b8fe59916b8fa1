package queue

import (
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
// flight, DefaultMaxTenants tenants kept apart, and the real clock.
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

	// MaxTenants is the number of tenants (Priority.Tenant) whose shares
	// are kept apart; 0 means DefaultMaxTenants (100). While that many
	// have calls waiting or in flight, the calls of further tenants count
	// as one tenant, reported as OtherTenants. A negative MaxTenants
	// panics in New.
	MaxTenants int

	// Now is the clock against which PauseUntil measures its deadline,
	// and that AcquireAt reads the grant from; nil means time.Now. The end
	// of a pause is detected by a runtime timer, so Now must advance with
	// real time (or with the fake clock of testing/synctest).
	Now func() time.Time
}

// A Queue hands out the in-flight slots of one lane to waiting calls, most
// urgent first, retries ahead of fresh calls of the same urgency, then
// shared fairly among the tenants with fresh calls waiting, and each
// tenant's calls first in, first out. Create it with New; the zero value is not usable. A Queue
// is safe for concurrent use by multiple goroutines.
type Queue struct {
	mu sync.Mutex

	capacity   int // fresh calls that may wait
	reserve    int // further places for retries only
	maxTenants int
	now        func() time.Time

	limit     int
	inFlight  int
	waiting   int
	byUrgency [Urgencies]int
	closed    bool

	// retries holds the retries waiting at each urgency, first in, first
	// out; the fresh calls wait in their tenant's lists, and round[u] is
	// the first of the tenants with fresh calls waiting at urgency u, in
	// the order they started waiting. grants counts the slots granted.
	retries [Urgencies]waitList
	round   [Urgencies]*tenant
	grants  uint64

	// tenants holds at most maxTenants tenants, busy and idle; idle lists
	// the idle ones, and other, made when first needed, takes the calls
	// of the names that find no room (see tenantLocked).
	tenants map[string]*tenant
	idle    tenantList
	other   *tenant
	last    *tenant // see lookupLocked

	// paused is true from PauseUntil until pausedUntil has passed; the
	// fast path reads the flag, not the clock.
	paused      bool
	pausedUntil time.Time
	timer       *time.Timer // ends the pause; created on first PauseUntil
	// holding is true from the end of a pause that found calls in flight
	// until a call ends while the queue is not paused, or none is in
	// flight: one call may be let out meanwhile (probe), the others wait
	// (see PauseUntil).
	holding, probe bool

	// drained, when not nil, is closed as soon as nothing waits or runs;
	// see Drain.
	drained chan struct{}

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
	if cfg.MaxTenants < 0 {
		panic("queue: negative MaxTenants")
	}
	q := &Queue{
		capacity:   cfg.Capacity,
		reserve:    cfg.RetryReserve,
		maxTenants: cfg.MaxTenants,
		limit:      max(cfg.Limit, 1),
		now:        cfg.Now,
		tenants:    make(map[string]*tenant),
	}
	if q.capacity == 0 {
		q.capacity = DefaultCapacity
	}
	if q.maxTenants == 0 {
		q.maxTenants = DefaultMaxTenants
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
	q.pool.New = func() any { return &waiter{ready: make(chan error, 1)} }
	return q
}

// Acquire waits for an in-flight slot for a call of priority p and returns
// nil once it holds one; the caller must then call ReleaseTenant with
// p.Tenant when the call is done.
//
// A slot is granted when fewer calls than the limit are in flight, the queue
// is not paused, and no waiting call goes before this one: calls go in
// order of urgency (0 first), then retries before fresh calls (first in,
// first out among retries); among the tenants with fresh calls waiting at
// that urgency, the one that holds the fewest slots goes first, and among
// those the one served least recently (never served first); a tenant's own
// calls go first in, first out. An urgency outside 0..7 is clamped into
// it.
//
// Acquire returns ErrFull at once when Capacity calls are waiting (for a
// retry: Capacity + RetryReserve) and none of them is a fresh call less
// urgent than p, which would leave the queue with ErrFull in its place
// (so a call may also get ErrFull after waiting), ErrClosed when the
// queue is closed, and
// ctx.Err() when ctx ends first, even if a slot is free. A call whose ctx
// ends while it waits leaves the queue at once; if a slot was granted to it
// at the same moment, the slot goes to the next waiting call.
func (q *Queue) Acquire(ctx context.Context, p Priority) error {
	_, err := q.AcquireAt(ctx, p)
	return err
}

// AcquireAt is Acquire that also returns when the slot was granted, by the
// queue's clock (Config.Now). A call that waited is granted its slot by
// the ReleaseTenant, SetLimit or end of a pause that lets it out, and goes on
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
		t, name := w.t, w.name
		q.put(w)
		if err == nil && done != nil {
			// Granted, but the caller may have left at the same moment:
			// prefer the cancellation, as semaphore.Weighted does.
			select {
			case <-done:
				q.mu.Lock()
				q.giveBackLocked(t, name)
				q.mu.Unlock()
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
		q.grantLocked(q.tenantLocked(p.Tenant))
		q.mu.Unlock()
		return nil, q.now(), nil
	}
	room := q.capacity
	if p.Retry {
		room += q.reserve
	}
	if q.waiting >= room && (p.Retry || !q.displaceLocked(clampUrgency(p.Urgency))) {
		q.mu.Unlock()
		return nil, time.Time{}, ErrFull
	}
	w := q.pool.Get().(*waiter)
	w.t = q.tenantLocked(p.Tenant)
	w.name = p.Tenant
	w.urgency = clampUrgency(p.Urgency)
	w.retry = p.Retry
	q.pushLocked(w)
	q.mu.Unlock()
	return w, time.Time{}, nil
}

// displaceLocked makes room for a fresh call of urgency u in a full queue
// by turning away a less urgent fresh call: of the least urgent urgency
// with fresh calls waiting, the newest call of the tenant with the most
// of them waiting there leaves the queue with ErrFull. It reports false
// if no fresh call less urgent than u waits. It requires q.mu to be held.
func (q *Queue) displaceLocked(u int) bool {
	for v := Urgencies - 1; v > u; v-- {
		first := q.round[v]
		if first == nil {
			continue
		}
		t := first
		for c := first.next[v]; c != first; c = c.next[v] {
			if c.fresh[v].n > t.fresh[v].n {
				t = c
			}
		}
		w := t.fresh[v].tail
		q.removeLocked(w)
		q.endCallLocked(w.t, w.name)
		w.ready <- ErrFull // room for one answer: never blocks
		return true
	}
	return false
}

// leave takes w, whose caller has gone, out of the queue.
//
//go:noinline
func (q *Queue) leave(w *waiter) {
	if q.testHookCancel != nil {
		q.testHookCancel()
	}
	q.mu.Lock()
	if w.queued {
		// Still waiting: leave. No slot is free while anyone waits
		// (see grantWaitingLocked), so no one else can be granted now.
		q.removeLocked(w)
		q.endCallLocked(w.t, w.name)
		q.notifyIdleLocked()
	} else if err := <-w.ready; err == nil {
		// Granted after the cancel: give the slot back.
		q.giveBackLocked(w.t, w.name)
	}
	q.mu.Unlock()
	q.put(w)
}

// put returns w, answered and out of every list, to the pool.
func (q *Queue) put(w *waiter) {
	w.t, w.name = nil, ""
	q.pool.Put(w)
}

// TryAcquire takes an in-flight slot if one can be granted at once to a call
// of priority p, without waiting, and reports whether it did. A true result
// must be followed by ReleaseTenant(p.Tenant). It never takes a slot ahead
// of a waiting call; since a slot is free only while no call waits, only
// p.Tenant, on which the slot is counted, matters.
func (q *Queue) TryAcquire(p Priority) bool {
	q.mu.Lock()
	ok := !q.closed && q.grantableLocked()
	if ok {
		q.grantLocked(q.tenantLocked(p.Tenant))
	}
	q.mu.Unlock()
	return ok
}

// ReleaseTenant ends one in-flight call of the named tenant and grants its
// slot, and any other free slot, to the next waiting calls. Releasing more
// calls of a tenant than were acquired is a bug in the caller and panics,
// as in semaphore.Weighted. ReleaseTenant may be called after Close.
func (q *Queue) ReleaseTenant(name string) {
	q.mu.Lock()
	t := q.inFlightLocked(name)
	if t == nil {
		q.mu.Unlock()
		panic("queue: ReleaseTenant without a matching Acquire")
	}
	q.finishLocked(t, name)
	q.mu.Unlock()
}

// finishLocked ends a call of the named tenant in flight on t and grants
// the free slots. It requires q.mu to be held.
func (q *Queue) finishLocked(t *tenant, name string) {
	// A call that ends during a pause was, as far as the queue can tell,
	// refused (the caller pauses on a refusal before it releases the
	// slot): it freed nothing at the provider.
	q.freeLocked(t, name, !q.paused)
}

// giveBackLocked takes back a slot granted to a call of the named tenant
// on t whose caller left before using it, and grants it again. A call
// that did not run frees nothing either: a queue holding after a pause
// lets the next call out in its place. It requires q.mu to be held.
func (q *Queue) giveBackLocked(t *tenant, name string) {
	if q.holding {
		q.probe = true
	}
	q.freeLocked(t, name, false)
}

// freeLocked ends a call of the named tenant in flight on t and grants the
// free slots; freed says that the call's end freed a slot at the provider,
// which ends a hold after a pause. It requires q.mu to be held.
func (q *Queue) freeLocked(t *tenant, name string, freed bool) {
	t.inFlight--
	q.inFlight--
	if freed || q.inFlight == 0 {
		q.holding = false
	}
	q.endCallLocked(t, name)
	q.grantWaitingLocked()
	q.notifyIdleLocked()
}

// SetLimit sets the number of calls that may be in flight at once; n < 0
// means 0. A limit of 0 grants no call, for no set time, until the limit is
// raised: calls may still queue meanwhile (a lane with no share of a limit
// shared with others). Raising the limit grants waiting calls at once.
// Lowering it preempts nothing: calls already in flight finish, and no call
// is granted until fewer than n are in flight.
func (q *Queue) SetLimit(n int) {
	q.mu.Lock()
	q.limit = max(n, 0)
	q.grantWaitingLocked()
	q.mu.Unlock()
}

// Close refuses all further calls: every call still waiting returns
// ErrClosed, and so does every later Acquire. Calls in flight are not
// affected and still call ReleaseTenant. Close stops the pause timer. Calling
// Close more than once does nothing.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	q.paused, q.holding = false, false
	if q.timer != nil {
		q.timer.Stop()
	}
	for q.waiting > 0 {
		w := q.nextLocked()
		q.removeLocked(w)
		q.endCallLocked(w.t, w.name)
		w.ready <- ErrClosed
	}
	q.notifyIdleLocked()
}

// Drain waits until no call is waiting or in flight, or until ctx ends, and
// returns ctx.Err() in that case. It does not refuse new calls: a graceful
// shutdown stops the sources of fresh calls, drains (retries of calls in
// flight may still queue meanwhile), then closes.
func (q *Queue) Drain(ctx context.Context) error {
	q.mu.Lock()
	if q.inFlight == 0 && q.waiting == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.drained == nil {
		q.drained = make(chan struct{})
	}
	drained := q.drained
	q.mu.Unlock()

	select {
	case <-drained:
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
		Waiting:          q.waiting,
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
	return q.waiting
}

// grantableLocked reports whether a new call may take a slot at once.
// It requires q.mu to be held.
func (q *Queue) grantableLocked() bool {
	return q.openLocked() && q.inFlight < q.limit && q.waiting == 0
}

// openLocked reports whether the queue grants slots at all: it is not
// paused, and not holding after a pause unless the probe is still to go.
// It requires q.mu to be held.
func (q *Queue) openLocked() bool {
	return !q.paused && (!q.holding || q.probe)
}

// grantLocked counts a slot granted to a call of t. It requires q.mu to be
// held.
func (q *Queue) grantLocked(t *tenant) {
	if q.holding {
		q.probe = false // the probe goes out
	}
	t.inFlight++
	q.inFlight++
	q.grants++
	t.served = q.grants
}

// grantWaitingLocked hands free slots to waiting calls in order (see
// nextLocked). Afterwards either no call waits, or no slot is free (the
// queue is paused or full): the rest of the package relies on that. It
// requires q.mu to be held.
func (q *Queue) grantWaitingLocked() {
	var now time.Time
	for q.openLocked() && q.inFlight < q.limit && q.waiting > 0 {
		w := q.nextLocked()
		q.removeLocked(w)
		q.grantLocked(w.t)
		if now.IsZero() {
			now = q.now()
		}
		w.granted = now
		w.ready <- nil // room for one answer: never blocks
	}
}

// nextLocked returns the waiting call that goes next; the caller takes it
// out of its list. Some call must be waiting. It requires q.mu to be held.
//
// The most urgent calls go first, retries before fresh calls. Among the
// tenants with fresh calls waiting at that urgency, the slot goes to the
// one with the fewest calls in flight, and among those to the one served
// least recently (one never served first, then the one that started
// waiting first), which takes its oldest call.
func (q *Queue) nextLocked() *waiter {
	u := 0
	for q.byUrgency[u] == 0 {
		u++
	}
	if w := q.retries[u].head; w != nil {
		return w
	}
	first := q.round[u]
	t := first
	for c := first.next[u]; c != first; c = c.next[u] {
		if c.inFlight < t.inFlight || c.inFlight == t.inFlight && c.served < t.served {
			t = c
		}
	}
	return t.fresh[u].head
}

// pushLocked puts w, whose tenant, urgency and retry flag are set, last in
// its list. It requires q.mu to be held.
func (q *Queue) pushLocked(w *waiter) {
	if w.retry {
		q.retries[w.urgency].pushBack(w)
	} else {
		l := &w.t.fresh[w.urgency]
		if l.n == 0 {
			q.joinRoundLocked(w.t, w.urgency)
		}
		l.pushBack(w)
	}
	w.queued = true
	w.t.waiting++
	q.waiting++
	q.byUrgency[w.urgency]++
}

// removeLocked takes w out of its list; a tenant left with no fresh call
// of w's urgency leaves that urgency's round. It requires q.mu to be held.
func (q *Queue) removeLocked(w *waiter) {
	if w.retry {
		q.retries[w.urgency].remove(w)
	} else {
		l := &w.t.fresh[w.urgency]
		l.remove(w)
		if l.n == 0 {
			q.leaveRoundLocked(w.t, w.urgency)
		}
	}
	w.queued = false
	w.t.waiting--
	q.waiting--
	q.byUrgency[w.urgency]--
}

// notifyIdleLocked wakes Drain callers once nothing waits or runs.
// It requires q.mu to be held.
func (q *Queue) notifyIdleLocked() {
	if q.drained != nil && q.inFlight == 0 && q.waiting == 0 {
		close(q.drained)
		q.drained = nil
	}
}

func clampUrgency(u int) int {
	return min(max(u, 0), Urgencies-1)
}
