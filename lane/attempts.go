package lane

import (
	"slices"
	"sync"
	"sync/atomic"
)

// A Mark is a point in a lane's history: how many attempts had been
// dispatched and calls answered successfully by then. The zero value is
// the lane's start.
type Mark struct {
	seq    uint64 // attempts dispatched
	served uint64 // successful answers
}

// An Attempt is one dispatch of a call in a lane, as Dispatch registered
// it: the lane's Mark as of its dispatch, itself included. The zero value
// is no attempt.
type Attempt Mark

// attempts keeps, in dispatch order, the attempts of a lane that hold the
// provider's capacity (from Dispatch until Done: a stream until it ends),
// and counts the lane's successful answers. It is what tells a 429 that
// came while the lane was being served apart from one that came while the
// provider served nobody (see Lane.Contended).
type attempts struct {
	served atomic.Uint64 // successful answers (see Lane.Answered)

	mu   sync.Mutex
	last uint64 // seq of the latest dispatch
	// seqs[head:] holds seq<<1 | ended of the attempts from the oldest
	// in flight on, ascending; an entry that ended is passed over once it
	// reaches the front, and dropped when the ended ones outnumber the
	// live ones (see compactLocked), so the slice stays within a small
	// multiple of the attempts in flight.
	seqs []uint64
	head int
	live int
}

func (a *attempts) dispatch() Attempt {
	served := a.served.Load()
	a.mu.Lock()
	a.last++
	at := Attempt{seq: a.last, served: served}
	a.seqs = append(a.seqs, at.seq<<1)
	a.live++
	a.mu.Unlock()
	return at
}

// done ends at and reports whether it was in flight.
func (a *attempts) done(at Attempt) bool {
	if at.seq == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.seqs[a.head:]
	i, found := a.search(at.seq)
	if !found || q[i]&1 != 0 {
		return false // ended already
	}
	q[i] |= 1
	a.live--
	a.compactLocked()
	return true
}

// search finds seq in a.seqs[a.head:]. It requires a.mu to be held.
func (a *attempts) search(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(a.seqs[a.head:], seq, func(e, seq uint64) int {
		switch e >>= 1; {
		case e < seq:
			return -1
		case e > seq:
			return 1
		}
		return 0
	})
}

// compactLocked passes over the ended entries at the front, and drops
// every ended one once they outnumber the live ones. It requires a.mu to
// be held.
func (a *attempts) compactLocked() {
	for a.head < len(a.seqs) && a.seqs[a.head]&1 != 0 {
		a.head++
	}
	if len(a.seqs) > 2*a.live+16 {
		a.seqs = slices.DeleteFunc(a.seqs, func(e uint64) bool { return e&1 != 0 })
		a.head = 0
	}
}

func (a *attempts) mark() Mark {
	served := a.served.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	return Mark{seq: a.last, served: served}
}

// inFlightUpTo reports whether an attempt dispatched at or before m is
// still in flight.
func (a *attempts) inFlightUpTo(m Mark) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.head < len(a.seqs) && a.seqs[a.head]>>1 <= m.seq
}

// othersInFlight reports whether an attempt other than at is in flight.
func (a *attempts) othersInFlight(at Attempt) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	mine := 0
	if i, found := a.search(at.seq); found && a.seqs[a.head+i]&1 == 0 {
		mine = 1
	}
	return a.live > mine
}

// Dispatch registers an attempt the caller is about to send, holding its
// slot. Call Done once the attempt no longer holds the provider's
// capacity: when it failed or was cut, or once its answer has been passed
// back whole (a stream, when it ends).
func (l *Lane) Dispatch() Attempt {
	l.load.attempts.Add(1)
	return l.att.dispatch()
}

// Done ends the attempt a; a zero Attempt is ignored, and so is a second
// Done of the same attempt.
func (l *Lane) Done(a Attempt) {
	if l.att.done(a) {
		l.load.attempts.Add(-1)
	}
}

// Mark returns the lane's Mark now.
func (l *Lane) Mark() Mark { return l.att.mark() }

// ServedSince reports whether a call of the lane has been answered
// successfully (see Answered) since m.
func (l *Lane) ServedSince(m Mark) bool { return l.att.served.Load() > m.served }

// InFlightUpTo reports whether an attempt dispatched at or before m is
// still in flight.
func (l *Lane) InFlightUpTo(m Mark) bool { return l.att.inFlightUpTo(m) }

// Contended reports whether a, refused by the provider, was refused while
// the lane's other calls were being served: a call of the lane was
// answered successfully after a was dispatched, or another attempt of the
// lane is in flight. Under a concurrency cap that is a call that lost the
// race for a slot the lane's own calls hold; a provider that refuses
// everybody answers nothing, and holds no call for long. Call it before
// Done(a).
func (l *Lane) Contended(a Attempt) bool {
	return l.ServedSince(Mark(a)) || l.att.othersInFlight(a)
}
