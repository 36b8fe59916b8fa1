package lane

import (
	"math"
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
	// attempts counts the upstream's attempts in flight, over its lanes
	// (Dispatch to Done), each on a connection or waiting for one, and
	// max is its connections (Config.MaxConnsPerUpstream).
	attempts atomic.Int32
	max      int32
}

// loadLocked returns the connLoad of an upstream, made on first use. It
// requires r.mu to be held for writing.
func (r *Registry) loadLocked(upstream string) *connLoad {
	cl := r.loads[upstream]
	if cl == nil {
		cl = &connLoad{max: int32(min(r.cfg.MaxConnsPerUpstream, math.MaxInt32))}
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

// ConnsTaken reports whether the lane's upstream has more attempts in
// flight (see Dispatch), over its lanes, than connections: an attempt
// just dispatched waits for one to come free (see WaitConn).
func (l *Lane) ConnsTaken() bool { return l.load.attempts.Load() > l.load.max }

// WaitConn counts, from now, an attempt of the lane that waits for a free
// connection to its upstream, until GotConn. Such an attempt holds its
// slot and is not at the provider yet, as a call held for the provider's
// budget (see Hold): the controller reads it so (aimd.Sample.Held,
// Unsent), so that calls silent while they wait for a connection do not
// read as calls the provider queues. Held does not count it.
func (l *Lane) WaitConn(now time.Time) { l.connWaits.begin(now) }

// GotConn ends at now a wait begun with WaitConn: the attempt's request
// is handed to a connection, or it has failed.
func (l *Lane) GotConn(now time.Time) { l.connWaits.end(now) }
