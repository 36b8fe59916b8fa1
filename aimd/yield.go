package aimd

import (
	"math"
	"time"
)

// The yield of the default preset: a lane that has held its level for
// yieldRounds quiet round trips gives back yieldShare of its calls for a
// round trip, so that other Governors on the same account find room
// (see DESIGN.md).

// restartShareClock counts the quiet round trips before the next yield
// from now: after a congestion signal, a yield, or growth into capacity
// that nobody holds.
func (d *defaultState) restartShareClock(now time.Time) {
	d.quiet, d.rtStart, d.quietSince = 0, now, now
}

// contested notes a congestion signal (a 429, a timeout, a cut on
// latency, a decrease adopted from others): others may want the slots a
// yield gives back, and the next yield gives back yieldShare again.
func (d *defaultState) contested() {
	d.yieldFrom, d.untaken, d.yieldHold = 0, false, 0
	d.signalled = true
}

// unsought reports whether nothing says that anyone wants the lane's
// slots: no congestion signal has come since New, or the last yield went
// untaken and none has come since.
func (d *defaultState) unsought() bool { return d.untaken || !d.signalled }

// yieldDueLocked reports whether the share clock has run long enough
// for a yield: yieldRounds quiet round trips and yieldGap, both
// stretched by untakenStretch while the last yield went untaken, if the
// lane yields from more than Initial/yieldShare calls (its yield gives
// back one call, not yieldShare). It requires c.mu to be held.
func (c *Controller) yieldDueLocked(s Sample, now time.Time) bool {
	d := &c.defaultRule
	rounds, gap := yieldRounds, yieldGap
	if d.untaken && c.yieldLevelLocked(s)*yieldShare > c.cfg.Initial {
		// Nobody took the last yield's slots. One yield still comes
		// every 20 round trips: a process that joins gets in at the
		// first that its asks meet, and the 429 its calls give the
		// lane on the way back brings yields of yieldShare every
		// yieldRounds again.
		rounds, gap = untakenStretch*rounds, untakenStretch*gap
	}
	return d.quiet >= rounds && now.Sub(d.quietSince) >= gap
}

// yieldLevelLocked is the level a yield at the answer s gives back from:
// the limit, or the calls in flight if fewer. It requires c.mu to be
// held.
func (c *Controller) yieldLevelLocked(s Sample) float64 {
	level := float64(c.limitLocked())
	if s.InFlight > 0 && float64(s.InFlight) < level {
		level = float64(s.InFlight)
	}
	return level
}

// yieldDefaultLocked gives back yieldShare of the lane's calls in flight
// after yieldRounds quiet round trips (at least one call; one call, kept
// free for yieldProbeRounds round trips, from more than
// Initial/yieldShare calls while the yield is unsought), and returns
// Yielded; or None when the lane has fewer than 2 calls to give from.
// It requires c.mu to be held.
func (c *Controller) yieldDefaultLocked(s Sample, now time.Time) Event {
	d := &c.defaultRule
	d.quiet = 0
	level := c.yieldLevelLocked(s)
	if level < 2 {
		return None
	}
	// The lane does not refill the freed slots until a call sent after
	// now succeeds, about a round trip: a competitor that asks then gets
	// them. Then it slow-starts back to where it was; what a competitor
	// took shows as a 429 on the way, and the usual decrease follows.
	keep := level * (1 - yieldShare)
	if d.unsought() && level*yieldShare > c.cfg.Initial {
		// No congestion signal since New, or none since a yield that
		// nobody took: nobody is known to want slots. The yield is then
		// a probe for a process that joins, and what finds one is how
		// long a slot stands free, not how many: a joiner gets in with
		// one call, which makes the lane's way back meet a 429, and
		// the yields give back 30% from then on. So give back one call
		// and keep its slot free for yieldProbeRounds round trips (30%
		// of 64 calls for one round trip would leave 19 slots idle).
		keep = level - 1
		d.yieldHold = yieldProbeRounds
	}
	if d.backoff.doubled(latencyCeiling) > 0 {
		// Backed off at a latency knee, the lane yields to keep the
		// level below the knee measured, the baseline its probes are
		// judged against (profile.go): the whole number of calls
		// nearest yieldShare does that, where the limit rounded down
		// would give back half the calls at a knee of 4, 3 of 8 at 8.
		keep = math.Round(keep)
	}
	c.target = math.Max(1, math.Min(keep, level-1))
	d.ss = math.Max(d.ss, level)
	d.probing, d.gain = false, 0
	d.yieldAt = now
	d.yieldFrom = level
	d.restartShareClock(now)
	c.yields++
	return Yielded
}
