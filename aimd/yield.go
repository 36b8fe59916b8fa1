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
func (d *defaultState) contested() { d.yieldFrom, d.untaken = 0, false }

// yieldDueLocked reports whether the share clock has run long enough
// for a yield: yieldRounds quiet round trips and yieldGap, both
// stretched by untakenStretch while the last yield went untaken, if the
// lane yields from more than Initial/yieldShare calls (its yield gives
// back Initial, not yieldShare). It requires c.mu to be held.
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
// after yieldRounds quiet round trips (at least one call; at most Initial
// while the last yield was untaken), and returns Yielded; or None when
// the lane has fewer than 2 calls to give from. It requires c.mu to be
// held.
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
	if d.untaken {
		// Nobody took what the last yield gave back, and no congestion
		// signal has come since: nobody was waiting for slots then. A
		// process that joins since asks for Initial calls at first (it
		// grows only as its own calls come back), so give back no more
		// than that: 30% of 64 calls would leave 11 of them idle for
		// the round trip. What it takes shows as a 429 on the way back,
		// and the next yield is 30% again.
		keep = math.Max(keep, level-c.cfg.Initial)
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
