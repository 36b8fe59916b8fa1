package aimd

import (
	"math"
	"time"
)

// This file holds the Default preset. doc.go states its rules in prose;
// the comments here say where each comes from.

// defaultState is the part of Controller used by the Default preset.
type defaultState struct {
	// ss is the slow-start threshold: below it the target grows by 1 per
	// in-use success, doubling every round trip. It is Max until the first
	// decrease, then just below the level of the last decrease.
	ss float64
	// The round-trip clock, running while target >= ss. A round trip ends
	// when a call dispatched after roundStart succeeds: no latency
	// estimate is needed to count round trips.
	probing    bool
	roundStart time.Time
	roundLimit int     // the limit when the current round trip began
	rounds     int     // round trips completed at or above ss
	gain       float64 // increase per round trip above ss; 0 while holding
	skipHold   bool    // probe without holding (after a repeat decrease)
	// confirmed: a call dispatched after the last decrease has succeeded,
	// so that decrease was enough.
	confirmed bool
	// The storm detector: decreases with no success at all in between.
	streak      int
	streakStart time.Time
	streakLevel float64 // limit at the first decrease of the streak
	// recoverTo is, while collapsed, the target at which the controller
	// reports Recovered.
	recoverTo float64
}

func (d *defaultState) init(cfg Config) {
	d.ss = float64(cfg.Max) // no decrease yet: slow start up to Max
	d.confirmed = true
}

// observeDefaultLocked requires c.mu to be held.
func (c *Controller) observeDefaultLocked(s Sample, now time.Time) Event {
	d := &c.defaultRule
	dispatched := now.Add(-s.Latency)
	// A call dispatched at or before the last decrease was sent under the
	// old, higher limit: its answer says nothing about the current one.
	// This is TCP's "one reduction per window of data" (RFC 5681 §3.2,
	// RFC 6582): a burst of 429s caused by one overshoot is one decrease.
	fresh := c.lastDecr.IsZero() || dispatched.After(c.lastDecr)
	switch s.Outcome {
	case Success:
		c.observeLatencyLocked(s.Latency)
		d.streak = 0 // something got through: not a storm
		if !fresh {
			return None
		}
		d.confirmed = true
		// Grow only while the limit is what holds the lane back
		// (RFC 7661's "cwnd-limited"): otherwise an idle or lightly used
		// lane would wind its target up to Max and release a burst later.
		if s.InFlight > 0 && s.InFlight < c.limitLocked() {
			return None
		}
		return c.growDefaultLocked(dispatched, now)
	case RateLimited, Timeout:
		if !fresh {
			return None // explained by the last decrease
		}
		return c.decreaseDefaultLocked(s, now)
	default:
		return None // Failure: not a congestion signal
	}
}

// growDefaultLocked applies one in-use success of a call dispatched after
// the last decrease. It requires c.mu to be held.
func (c *Controller) growDefaultLocked(dispatched, now time.Time) Event {
	d := &c.defaultRule
	if c.target < d.ss {
		// Slow start (RFC 5681 §3.1): +1 per success doubles the target
		// every round trip, up to the threshold.
		c.target = math.Min(c.target+1, d.ss)
	} else {
		if !d.probing {
			d.probing, d.roundStart, d.roundLimit, d.rounds, d.gain = true, now, c.limitLocked(), 0, 0
			if d.skipHold {
				d.rounds = c.cfg.ProbeHold
			}
		}
		if !dispatched.Before(d.roundStart) {
			// A call sent after the round began is back: one round trip.
			d.rounds++
			d.roundStart = now
			switch {
			case c.decrLevel > 0 && float64(d.roundLimit) >= c.decrLevel:
				// A whole round trip ran at the level that failed, without
				// congestion: capacity has grown. Forget that level and
				// slow start again (from the next success).
				d.ss, d.probing = float64(c.cfg.Max), false
				c.decrLevel = 0
			case d.rounds >= c.cfg.ProbeHold:
				// Probing, CUBIC-like (RFC 9438): flat near the level that
				// failed, then convex: the increase per round trip starts
				// at IncreaseStep and doubles every clean round trip, up
				// to slow start's.
				if d.gain == 0 {
					d.gain = c.cfg.IncreaseStep
				} else {
					d.gain *= 2
				}
				d.gain = math.Min(d.gain, c.target)
			}
			d.roundLimit = c.limitLocked()
		}
		// Congestion avoidance: +gain/target per success is +gain per
		// round trip when the whole limit is in use.
		c.target += d.gain / c.target
	}
	// Nothing accumulates above Max.
	c.target = math.Min(c.target, float64(c.cfg.Max))
	if c.collapsed && c.target >= d.recoverTo {
		c.collapsed = false
		return Recovered
	}
	return None
}

// decreaseDefaultLocked applies a congestion signal from a call
// dispatched after the last decrease. It requires c.mu to be held.
func (c *Controller) decreaseDefaultLocked(s Sample, now time.Time) Event {
	d := &c.defaultRule
	// The level at which congestion showed: the limit, or fewer if fewer
	// calls were in flight.
	level := float64(c.limitLocked())
	if s.InFlight > 0 && float64(s.InFlight) < level {
		level = float64(s.InFlight)
	}
	if d.streak > 0 && now.Sub(d.streakStart) <= c.cfg.CollapseWindow {
		d.streak++
	} else {
		d.streak, d.streakStart, d.streakLevel = 1, now, level
	}
	repeat := !d.confirmed
	c.lastDecr = now
	d.confirmed = false
	d.probing, d.gain = false, 0
	if d.streak >= c.cfg.CollapseThreshold {
		// A storm: CollapseThreshold decreases, each from a call sent
		// after the previous one, and nothing got through in between.
		// Stop at 1, and slow start back to half the pre-storm level, as
		// TCP does after a retransmission timeout (RFC 5681 §3.1:
		// ssthresh = flight/2, cwnd = 1).
		c.target = 1
		c.decrLevel = d.streakLevel
		d.ss = math.Max(1, math.Min(c.cfg.RepeatDecreaseRatio*d.streakLevel, float64(c.cfg.Max)))
		d.recoverTo = d.ss
		d.skipHold = false
		d.streak = 0
		c.collapsed = true
		c.collapses++
		return Collapsed
	}
	c.decrLevel = level
	c.collapsed = false // a decrease is a new operating point
	c.decreases++
	if repeat {
		// The previous cut was not enough (congestion again before any call
		// sent after it succeeded): cut hard, like CUBIC's fast convergence
		// but stronger, and probe from there at once since the level that
		// works is unknown.
		c.target = math.Max(1, c.target*c.cfg.RepeatDecreaseRatio)
		d.ss = c.target
		d.skipHold = true
	} else {
		// A fresh signal after a confirmed level, typically one probe too
		// many: cut gently (Netflix concurrency-limits' AIMDLimit backs off
		// by 0.9 too) and slow start back to just below the level that
		// failed, where probing holds for ProbeHold round trips.
		c.target = math.Max(1, c.target*c.cfg.DecreaseRatio)
		d.ss = math.Max(c.target, level-1)
		d.skipHold = false
	}
	return Decreased
}
