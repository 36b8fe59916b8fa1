package proxy

import (
	"sync"
	"time"
)

// An upstream has at most Config.MaxConnsPerUpstream connections, shared by
// every lane that calls it. A call that holds a lane's slot needs one of
// them (a stream keeps it until its last byte); beyond the bound, calls
// wait for a free connection (at most ConnectTimeout) whatever their lanes'
// limits. connLoad says when that happens, for GET /governor/lanes and the
// metrics: the lanes of an upstream whose calls in flight fill its
// connections are limited by the connections, not by their controllers.

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
}

// upstreamInFlight returns the calls in flight to up, summed over its lanes
// at most connLoadTTL ago.
func (ls *lanes) upstreamInFlight(up *upstream) int {
	now := ls.cfg.Now()
	up.load.mu.Lock()
	defer up.load.mu.Unlock()
	if age := now.Sub(up.load.at); !up.load.at.IsZero() && age >= 0 && age < connLoadTTL {
		return up.load.inFlight
	}
	n := 0
	for _, l := range ls.all() {
		if l.upstream == up {
			n += l.q.Stats().InFlight
		}
	}
	up.load.at, up.load.inFlight = now, n
	return n
}

// inFlightByUpstream sums the calls in flight of every upstream now.
func inFlightByUpstream(all []*lane) map[*upstream]int {
	sums := map[*upstream]int{}
	for _, l := range all {
		sums[l.upstream] += l.q.Stats().InFlight
	}
	return sums
}

// connLimited reports whether a lane with inFlight calls in flight is held
// back by its upstream's connections, which upstreamInFlight calls fill.
func (up *upstream) connLimited(upstreamInFlight, inFlight int) bool {
	return inFlight > 0 && upstreamInFlight >= up.maxConns
}
