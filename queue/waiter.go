package queue

import "time"

// A waiter is one call waiting in a Queue.
//
// Waiters are pooled (see Queue.pool), so their channel is never closed:
// the answer is a single send on ready, which has room for exactly one
// value. The queue sends only while the waiter is in a wait list and takes
// it out of the list in the same critical section, so a waiter receives at
// most one answer per wait; whoever takes the waiter out of play (the
// Acquire that received the answer, or the cancelled Acquire that drained
// it under the lock) leaves ready empty before putting the waiter back in
// the pool.
type waiter struct {
	prev, next *waiter // neighbours in the wait list
	queued     bool    // in a wait list; false once answered or left

	t       *tenant // the tenant the call is counted on
	name    string  // the tenant the caller named (t.name unless folded)
	urgency int
	retry   bool

	// ready receives nil when a slot is granted and ErrClosed when the
	// queue is closed.
	ready chan error
	// granted is when the slot was granted, by the queue's clock: set
	// before nil is sent on ready.
	granted time.Time
}

// A waitList is a first-in, first-out list of waiters, linked through the
// waiters themselves so that a cancelled waiter leaves in O(1).
type waitList struct {
	head, tail *waiter
	n          int
}

func (l *waitList) pushBack(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
}

func (l *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.n--
}
