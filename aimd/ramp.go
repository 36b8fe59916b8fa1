package aimd

import (
	"math"
	"time"
)

// This file holds the Default preset's start: the admission ramp.
// DESIGN.md ("The start: an admission ramp") states the rule and the
// figures behind it.

// rampState is the part of defaultState that paces a lane's start.
type rampState struct {
	// on: the lane is ramping from 1 call toward Initial.
	on bool
	// at is when the current start window opened: New, or the last step.
	at time.Time
	// admitted is how many calls the lane had out, unrefused, when the
	// limit last grew (1 if none yet but a call has been answered): the
	// provider holds at least that many for it.
	admitted int
	// young: the ramp ended on a refusal with calls admitted, and fewer
	// than rampYoung × Initial calls sent after it have succeeded
	// (answers counts them).
	young   bool
	answers int
	// topAt is when the ramp's step took the limit from lowTop (at most
	// Initial/2) above Initial/2 (zero if it has not): calls let out
	// before it went out with at most lowTop in flight.
	topAt  time.Time
	lowTop int
	// burst: the ramp ended on a refusal, and further refusals of calls
	// let out before it each take one call off the limit (the step that
	// ended the ramp let out several calls; the refusals say how many of
	// them were too many, and a refusal slower than the window may say
	// that a call of the step before was too many).
	burst bool
}

const (
	// rampYoung × Initial successes after a ramp that found a ceiling,
	// a success above it still makes the lane ask as a newcomer.
	rampYoung = 16
)

// initRamp starts the ramp of a new lane, unless the ramp is off or
// Initial is 1 already.
func (d *defaultState) initRamp(cfg Config, now time.Time) {
	if cfg.AdmissionWindow <= 0 || cfg.Initial <= 1 {
		return
	}
	d.ramp = rampState{on: true, at: now}
}

// AdmitAt tells the controller that inFlight calls of the lane are out
// at now and that none has been refused since the limit last rose (a
// refusal would have been observed). A lane that starts (Default preset)
// holds one call, and raises its limit by one call toward Config.Initial
// each time its calls have been out unrefused for Config.AdmissionWindow
// (the first step) or half of it (the later ones): a provider refuses a
// call it has no room for at once, long before it would answer one.
// AdmitAt returns Increased when the limit rose; it does nothing
// (None) before the window has passed, when fewer than Limit calls are
// out (the limit was not tested), or once the start is over. inFlight 0
// means unknown: the limit counts as in use. Call it at AdmitDue.
func (c *Controller) AdmitAt(inFlight int, now time.Time) Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := &c.defaultRule
	if c.cfg.Preset != Default || !d.ramp.on {
		return None
	}
	limit := c.limitLocked()
	if now.Sub(d.ramp.at) < rampStep(c.cfg.AdmissionWindow, limit) {
		return None
	}
	if inFlight > 0 && inFlight < limit {
		return None
	}
	d.ramp.admitted = limit
	d.ramp.at = now
	if float64(limit) >= c.cfg.Initial {
		// Initial calls are in: the start is over.
		d.ramp.on = false
		return None
	}
	// One call more: a step of several calls at once, refused at the
	// first, would draw a 429 for each of the others.
	c.target = math.Min(c.cfg.Initial, math.Max(c.target, float64(limit+1)))
	if half := c.cfg.Initial / 2; float64(limit) <= half && float64(c.limitLocked()) > half {
		d.ramp.topAt, d.ramp.lowTop = now, limit
	}
	if c.latencyOn() {
		c.recordLimitLocked(now)
	}
	if c.limitLocked() > limit {
		return Increased
	}
	return None
}

// AdmitDue returns when AdmitAt may next raise the limit, and false once
// the lane's start is over (or for the Phoenix preset, which starts at
// Initial).
func (c *Controller) AdmitDue() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := &c.defaultRule
	if c.cfg.Preset != Default || !d.ramp.on {
		return time.Time{}, false
	}
	return d.ramp.at.Add(rampStep(c.cfg.AdmissionWindow, c.limitLocked())), true
}

// AdmitStep returns how long the calls out must go unrefused before the
// start's next step (AdmitDue is that long after the last step): the
// whole AdmissionWindow before the first step, half of it after.
func (c *Controller) AdmitStep() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return rampStep(c.cfg.AdmissionWindow, c.limitLocked())
}

// rampStep is how long the calls out at a limit of limit must go
// unrefused before the ramp's next step: the whole window at the first
// step (the lane has not had a call at the provider yet), half of it at
// the later ones. Half the window is still as long as the quickest refusal
// the lane's caller has seen from the upstream (package lane sets the
// window to at least twice that), and the start takes 16 ms to Initial (8)
// at 4 ms windows where whole windows would take 28.
func rampStep(window time.Duration, limit int) time.Duration {
	if limit <= 1 {
		return window
	}
	return window / 2
}

// rampRefusedLocked handles a 429 while the lane ramps, or one that
// follows the refusal that ended the ramp. It reports whether it handled
// it; if not, the 429 takes the usual way (the newcomer's, when nothing
// of the lane was admitted). It requires c.mu to be held.
func (c *Controller) rampRefusedLocked(s Sample, fresh bool, now time.Time) (Event, bool) {
	d := &c.defaultRule
	if d.ramp.burst && !fresh {
		// Another call of the step that ended the ramp was refused: the
		// provider holds one call fewer for the lane than was out.
		if c.target-1 >= 1 {
			c.target--
			d.ss = c.target
			c.decrLevel, d.prevLevel = c.target+1, c.target+1
		}
		return None, true
	}
	d.ramp.burst = false
	if !d.ramp.on {
		return None, false
	}
	d.ramp.on = false
	held := d.ramp.admitted
	if n := s.atProvider(); n > 0 {
		held = max(held, n-1)
	}
	if held == 0 {
		// Refused before any call of the lane got in: the provider was
		// full already (a lane joining others on a shared account). The
		// lane asks as a newcomer does, at Initial.
		c.target = c.cfg.Initial
		return None, false
	}
	// The provider holds held calls of the lane and refused one more: a
	// ceiling found at once, where the lane would otherwise come down to
	// it by ×0.9 per round trip. The lane is no newcomer: it has as many
	// calls in as the provider takes.
	d.answers = max(d.answers, int(math.Ceil(c.cfg.Initial)))
	c.target = float64(held)
	c.lastDecr, c.decrCause = now, RateLimited
	c.decreases++
	c.decrLevel, d.prevLevel = float64(held+1), float64(held+1)
	d.prevProbe = true // a ceiling found, as a probe finds one
	d.ss = c.target
	d.confirmed = false
	d.probing, d.gain, d.skipHold = false, 0, false
	d.reachedAt = time.Time{}
	d.streak = 0
	d.restartShareClock(now)
	d.contested()
	d.ramp.burst = true
	d.ramp.young, d.ramp.answers = true, 0
	return Decreased, true
}

// rampGrewLocked is told that the lane's capacity grew (a call succeeded
// above the level of its last decrease). A young lane then asks as a
// newcomer does. It requires c.mu to be held.
//
// Alone under a cap, the ceiling the ramp found stays put: no call ever
// succeeds above it. A lane that joined others on a shared account and
// got a call or two in at its start looks the same at first, but as the
// others give slots back its probes succeed; asking with one call more
// per probe hold, it would take many round trips to win its share, where
// a newcomer asks with every call it has waiting.
func (c *Controller) rampGrewLocked() {
	d := &c.defaultRule
	if !d.ramp.young {
		return
	}
	d.ramp.young = false
	// The provider took a call above what it held for the lane at its
	// start: it is shared, and others gave a slot back. Ask as a
	// newcomer does, at Initial.
	c.target = math.Max(c.target, c.cfg.Initial)
	d.answers = 0
}

// rampAnsweredLocked counts a fresh success of a young lane.
func (d *defaultState) rampAnsweredLocked(cfg Config) {
	if d.ramp.young {
		d.ramp.answers++
		if float64(d.ramp.answers) >= cfg.Initial*rampYoung {
			d.ramp.young = false
		}
	}
}
