package aimd

import (
	"math"
	"time"
)

// Adopt replaces the controller's target with one decided elsewhere: the
// shared target of a lane that several Governors govern together (package
// coord). target is clamped to [1, Max].
//
// lastDecrease and level describe the newest decrease behind that target.
// When lastDecrease is after the controller's own last decrease, the
// controller takes it as its own: answers of calls dispatched before it are
// explained by it (one decrease per round trip, across every Governor), and
// the Default preset slow starts back to just below level, as after a
// decrease of its own. An older or zero lastDecrease changes nothing but the
// target.
//
// Adopt counts no decrease and reports no event: the Governor that made the
// decrease counted it.
func (c *Controller) Adopt(target float64, lastDecrease time.Time, level float64) {
	if math.IsNaN(target) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.target = math.Min(math.Max(target, 1), float64(c.cfg.Max))
	newer := !lastDecrease.IsZero() && lastDecrease.After(c.lastDecr)
	if newer {
		c.lastDecr = lastDecrease
		c.decrLevel = level
	}
	if c.cfg.Preset == Phoenix {
		return
	}
	d := &c.defaultRule
	// The calls let out are this process's share of the target: the
	// ledger cannot count them (overdue.go).
	d.adopted = true
	d.ledger.entries = d.ledger.entries[:0]
	d.ramp = rampState{} // others decide the limit: no ramp of its own
	if newer {
		d.ss = math.Max(c.target, level-1)
		d.probing, d.gain = false, 0
		d.confirmed = false
		d.skipHold = false
		d.reachedAt = time.Time{}    // the level is new: not reached yet
		d.backoff = ceilingBackoff{} // others decide too: no back-off
		d.contested()
	}
	if c.collapsed && c.target >= d.recoverTo {
		c.collapsed = false
	}
}
