package lane

import (
	"sync"
	"sync/atomic"
	"time"
)

// An upstream has at most Config.MaxConnsPerUpstream connections, shared by
// every lane that calls it. A call that holds a lane's slot needs one of
// them (a stream keeps it until its last byte); beyond the bound, calls
// wait for a free connection whatever their lanes' limits. connLoad says
// when that happens, for Info and the metrics: the lanes of an upstream
// whose calls in flight fill its connections are limited by the
// connections, not by their controllers.

// connLoadTTL is how long a sum of an upstream's calls in flight is reused:
// a scrape reads every lane's gauge, and summing the lanes for each of them
// would cost the square of the lanes.
const connLoadTTL = 250 * time.Millisecond

// connLoad caches the calls in flight to one upstream, summed over its
// lanes.
type connLoad struct {
	mu       sync.Mutex
	at       time.Time
	inFlight int
	// refusal is the quickest 429 or 529 any lane of the upstream has had
	// (nanoseconds from dispatch; 0 before the first): how soon the
	// provider says no, for the admission window of its new lanes
	// (admit.go).
	refusal atomic.Int64
	// opening counts the connections to the upstream being opened,
	// lastOpen is when the last one opened (Unix nanoseconds of the
	// registry's clock) and quickestOpen the quickest opening so far
	// (nanoseconds): how far the provider is, for the steps of its lanes'
	// starts (admit.go).
	opening      atomic.Int32
	lastOpen     atomic.Int64
	quickestOpen atomic.Int64
}

// loadLocked returns the connLoad of an upstream, made on first use. It
// requires r.mu to be held for writing.
func (r *Registry) loadLocked(upstream string) *connLoad {
	cl := r.loads[upstream]
	if cl == nil {
		cl = &connLoad{}
		r.loads[upstream] = cl
	}
	return cl
}

// upstreamInFlight returns the calls in flight to l's upstream, summed over
// its lanes at most connLoadTTL ago.
func (r *Registry) upstreamInFlight(l *Lane) int {
	now := r.cfg.Now()
	cl := l.load
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if age := now.Sub(cl.at); !cl.at.IsZero() && age >= 0 && age < connLoadTTL {
		return cl.inFlight
	}
	n := 0
	for _, o := range r.All() {
		if o.key.Upstream == l.key.Upstream {
			n += o.q.Stats().InFlight
		}
	}
	cl.at, cl.inFlight = now, n
	return n
}

// inFlightByUpstream sums the calls in flight of every upstream now.
func inFlightByUpstream(all []*Lane) map[string]int {
	sums := map[string]int{}
	for _, l := range all {
		sums[l.key.Upstream] += l.q.Stats().InFlight
	}
	return sums
}

// connLimited reports whether a lane with inFlight calls in flight is held
// back by its upstream's connections, which upstreamInFlight calls fill.
func (r *Registry) connLimited(upstreamInFlight, inFlight int) bool {
	return inFlight > 0 && upstreamInFlight >= r.cfg.MaxConnsPerUpstream
}
