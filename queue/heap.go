package queue

import "time"

// A waiter is one call waiting in a Queue.
//
// Waiters are pooled (see Queue.pool), so their channel is never closed:
// the answer is a single send on ready, which has room for exactly one
// value. The queue sends only while the waiter is in the heap and removes it
// in the same critical section, so a waiter receives at most one answer per
// wait; whoever takes the waiter out of play (the Acquire that received the
// answer, or the cancelled Acquire that drained it under the lock) leaves
// ready empty before putting the waiter back in the pool.
type waiter struct {
	// key orders the heap: urgency in the top bits, then 0 for a retry and
	// 1 for a fresh call, then the arrival sequence number.
	key uint64
	// index is the waiter's position in the heap, or -1 when it is not in
	// the heap (answered, or never queued).
	index int
	// ready receives nil when a slot is granted and ErrClosed when the
	// queue is closed.
	ready chan error
	// granted is when the slot was granted, by the queue's clock: set
	// before nil is sent on ready.
	granted time.Time
}

const (
	urgencyShift = 61 // 3 bits of urgency: 0..7
	freshShift   = 60 // 1 bit: retries (0) sort before fresh calls (1)
	seqMask      = 1<<freshShift - 1
)

// makeKey builds the heap key of a call with urgency u (0..7), retry flag
// and arrival number seq. Smaller keys go first.
func makeKey(u int, retry bool, seq uint64) uint64 {
	k := uint64(u)<<urgencyShift | seq&seqMask
	if !retry {
		k |= 1 << freshShift
	}
	return k
}

func (w *waiter) urgency() int { return int(w.key >> urgencyShift) }

// waitHeap implements heap.Interface; the waiter with the smallest key is
// at the root. Swap keeps each waiter's index so that a cancelled waiter can
// be removed with heap.Remove in O(log n).
type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].key < h[j].key }

func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}

func (h *waitHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil // do not keep a pooled waiter reachable from the heap
	w.index = -1
	*h = old[:n-1]
	return w
}
