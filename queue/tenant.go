package queue

import (
	"slices"
	"strings"
)

// DefaultMaxTenants is the number of tenants a queue keeps apart when
// Config.MaxTenants is 0.
const DefaultMaxTenants = 100

// OtherTenants is the name under which Tenants reports the calls of the
// tenants beyond Config.MaxTenants, which count as one tenant.
// It is not a valid tenant name for the proxy, so no caller can take it.
const OtherTenants = "(other)"

// TenantStats is the share of one tenant in a queue.
type TenantStats struct {
	Name     string // the tenant, or OtherTenants
	Waiting  int    // its calls waiting for a slot
	InFlight int    // its calls holding a slot
}

// A tenant is one name's part of a queue: its fresh calls waiting at each
// urgency, in arrival order, its calls in flight, and when it was last
// served.
//
// A queue keeps at most Config.MaxTenants tenants. A tenant with no call
// waiting or in flight stays in the table, idle, until its entry is taken
// for a new name (least recently idle first); a name that finds the table
// full of busy tenants is folded into the queue's overflow tenant, whose
// folded map counts its calls by name, so that a name is never both in the
// table and folded, and its ReleaseTenant finds where it was counted.
type tenant struct {
	name              string
	waiting, inFlight int
	served            uint64 // Queue.grants at its last grant; 0: never

	fresh [Urgencies]waitList
	// next and prev link the tenants with fresh calls waiting at urgency
	// u into a ring, in the order they started waiting; Queue.round[u] is
	// the first.
	next, prev [Urgencies]*tenant

	// idleNext and idlePrev link the idle tenants, least recently idle
	// first (Queue.idle).
	idleNext, idlePrev *tenant

	folded map[string]int // the overflow tenant only
}

func (t *tenant) busy() bool { return t.waiting+t.inFlight > 0 }

// tenantList is the list of idle tenants, least recently idle at head.
type tenantList struct{ head, tail *tenant }

func (l *tenantList) pushBack(t *tenant) {
	t.idlePrev, t.idleNext = l.tail, nil
	if l.tail != nil {
		l.tail.idleNext = t
	} else {
		l.head = t
	}
	l.tail = t
}

func (l *tenantList) remove(t *tenant) {
	if t.idlePrev != nil {
		t.idlePrev.idleNext = t.idleNext
	} else {
		l.head = t.idleNext
	}
	if t.idleNext != nil {
		t.idleNext.idlePrev = t.idlePrev
	} else {
		l.tail = t.idlePrev
	}
	t.idlePrev, t.idleNext = nil, nil
}

// tenantLocked returns the tenant on which a new call of the named tenant
// is counted, and counts it there: the name's own entry, made if needed
// (from an idle entry when the table is full), or the overflow tenant
// when every entry is busy. The caller then counts the call as waiting or
// in flight. It requires q.mu to be held.
func (q *Queue) tenantLocked(name string) *tenant {
	t, ok := q.lookupLocked(name)
	switch {
	case ok:
	case q.other != nil && q.other.folded[name] > 0:
		t = q.other // its calls stay together until they are all done
	case len(q.tenants) < q.maxTenants:
		t = &tenant{name: name}
		q.tenants[name] = t
		q.idle.pushBack(t)
	case q.idle.head != nil:
		t = q.idle.head
		delete(q.tenants, t.name)
		t.name, t.served = name, 0
		q.tenants[name] = t
	default:
		if q.other == nil {
			q.other = &tenant{name: OtherTenants, folded: make(map[string]int)}
		}
		t = q.other
	}
	if t == q.other {
		t.folded[name]++
	} else if !t.busy() {
		q.idle.remove(t)
	}
	return t
}

// lookupLocked returns the named tenant's entry, if it has one. The last
// entry found is remembered: a lane's calls mostly come from one tenant.
// It requires q.mu to be held.
func (q *Queue) lookupLocked(name string) (*tenant, bool) {
	if t := q.last; t != nil && t.name == name {
		return t, true // an entry's name is its key, even after reuse
	}
	t, ok := q.tenants[name]
	if ok {
		q.last = t
	}
	return t, ok
}

// endCallLocked uncounts a call of the named tenant that no longer waits
// nor runs; t.waiting or t.inFlight has been decremented already. It
// requires q.mu to be held.
func (q *Queue) endCallLocked(t *tenant, name string) {
	if t != q.other {
		if !t.busy() {
			q.idle.pushBack(t)
		}
		return
	}
	if n := t.folded[name] - 1; n > 0 {
		t.folded[name] = n
	} else {
		delete(t.folded, name)
	}
}

// inFlightLocked returns the tenant on which a call of the named tenant
// in flight is counted, or nil if there is none. It requires q.mu to be
// held.
func (q *Queue) inFlightLocked(name string) *tenant {
	t, ok := q.lookupLocked(name)
	if !ok && q.other != nil && q.other.folded[name] > 0 {
		t = q.other
	}
	if t == nil || t.inFlight == 0 {
		return nil
	}
	return t
}

// joinRoundLocked puts t last in the round of urgency u, which it must
// not be in. It requires q.mu to be held.
func (q *Queue) joinRoundLocked(t *tenant, u int) {
	first := q.round[u]
	if first == nil {
		t.next[u], t.prev[u] = t, t
		q.round[u] = t
		return
	}
	last := first.prev[u]
	t.prev[u], t.next[u] = last, first
	last.next[u] = t
	first.prev[u] = t
}

// leaveRoundLocked takes t out of the round of urgency u. It requires
// q.mu to be held.
func (q *Queue) leaveRoundLocked(t *tenant, u int) {
	if t.next[u] == t {
		q.round[u] = nil
	} else {
		t.prev[u].next[u] = t.next[u]
		t.next[u].prev[u] = t.prev[u]
		if q.round[u] == t {
			q.round[u] = t.next[u]
		}
	}
	t.next[u], t.prev[u] = nil, nil
}

// Tenants returns the tenants that have calls waiting or in flight, by
// name, then the tenants beyond Config.MaxTenants as one entry named
// OtherTenants, if any.
func (q *Queue) Tenants() []TenantStats {
	q.mu.Lock()
	var out []TenantStats
	for _, t := range q.tenants {
		if t.busy() {
			out = append(out, TenantStats{Name: t.name, Waiting: t.waiting, InFlight: t.inFlight})
		}
	}
	var other *TenantStats
	if t := q.other; t != nil && t.busy() {
		other = &TenantStats{Name: t.name, Waiting: t.waiting, InFlight: t.inFlight}
	}
	q.mu.Unlock()

	slices.SortFunc(out, func(a, b TenantStats) int { return strings.Compare(a.Name, b.Name) })
	if other != nil {
		out = append(out, *other)
	}
	return out
}
