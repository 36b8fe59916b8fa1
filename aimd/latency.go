package aimd

import (
	"math"
	"sort"
	"time"
)

// This file holds the Default preset's latency signal, for providers that
// queue calls instead of refusing them (vLLM, Ollama, a saturated
// gateway): they answer no 429, and past their knee every call takes
// longer, until calls time out. aimd/DESIGN.md has the measurements behind
// the rules.
//
// The lane keeps a baseline: how long the fastest of a cohort of calls
// takes when the provider does not queue them. A timeout while the
// fastest call of the last cohort took explodedRatio × the baseline
// collapses the lane: it is drowning the provider, even though some calls
// still succeed. (Whether one success was slowed by queueing is judged
// against the latency profile instead, profile.go: a single call varies
// far more than the fastest of a cohort, by an amount the profile
// measures and the baseline does not.)
//
// A cohort is the calls dispatched within one span of about a latency: the
// first of them to come back are its fastest, whatever its slow ones do,
// so its fastest call is known from its first latencyWindow successes.
// (Consecutive successes would not do: after a burst, the fast calls come
// back first and the next successes are all slow ones.) The fastest call of
// a cohort is what queueing moves and what output length and a heavy
// latency tail do not: a cohort almost always holds a short answer, and a
// tail only adds slow ones.

// latencyState is the Default preset's latency signal.
type latencyState struct {
	// cohorts are the calls grouped by when they were dispatched, in
	// spans of width from epoch on (a ring indexed by span).
	cohorts [cohortSlots]cohort
	width   time.Duration // 0 until the lane has a latency
	epoch   time.Time
	// limits is the recent history of the limit, to find the one a call
	// was dispatched under: entries in time order, at most
	// limitHistory, the oldest half dropped when full.
	limits []limitAt
	// logBase is the baseline, the log of an EWMA of uncongested
	// cohorts' fastest calls (valid once based), and spread the EWMA of
	// their absolute deviations from it: how much the fastest call of a
	// cohort varies by chance.
	logBase float64
	spread  float64
	based   bool
	// baseLevel is the EWMA of the limit of the cohorts behind the
	// baseline: where it was measured.
	baseLevel float64
	// last is the ratio of the last judged cohort to the baseline.
	last float64
}

// A cohort is the calls dispatched within one span (see above).
type cohort struct {
	span            int64
	fastest         float64 // seconds
	n               int
	level, minLevel int // highest and lowest limit its calls were sent under
	judged          bool
}

// limitAt is the limit from at on.
type limitAt struct {
	at    time.Time
	limit int
}

const (
	// latencyWindow successes of a cohort make its fastest call known.
	latencyWindow = 8
	// cohortSlots spans are kept: a call that comes back later than
	// that many spans after its dispatch is too slow to be among its
	// cohort's fastest.
	cohortSlots = 16
	// limitHistory bounds the limit's history: a cohort's calls were
	// sent within the last few round trips, a few dozen changes at most.
	limitHistory = 256
	// baseWeight is the weight of an uncongested cohort in the baseline
	// and in its spread.
	baseWeight = 0.25
	// baseLevelSlack: cohorts sent under up to this many times the
	// baseline's level update the baseline.
	baseLevelSlack = 1.25
	// initialSpread is the spread assumed before any is measured: with
	// spreadFactor it makes the first threshold e^0.8, about 2.2.
	initialSpread = 0.2
	// spreadFactor: a cohort is congested when its fastest call is above
	// the baseline by spreadFactor times the spread (and by
	// LatencyTolerance at least), which chance rarely does.
	spreadFactor = 4
	// explodedRatio: a lane whose last cohort's fastest call took this
	// many times the baseline and whose calls time out is collapsing.
	explodedRatio = 4
)

// latencyOn reports whether the latency signal is in force.
func (c *Controller) latencyOn() bool { return c.cfg.LatencyTolerance > 0 }

// latencyThresholdLocked is the ratio to the baseline above which a
// cohort is congested. It requires c.mu to be held.
func (c *Controller) latencyThresholdLocked() float64 {
	return math.Max(c.cfg.LatencyTolerance, math.Exp(spreadFactor*c.defaultRule.lat.spread))
}

// recordLimitLocked notes the limit in force from now. It requires c.mu
// to be held.
func (c *Controller) recordLimitLocked(now time.Time) {
	w := &c.defaultRule.lat
	l := c.limitLocked()
	if c.defaultRule.ramp.on {
		// The calls of a start are out together within a few admission
		// windows: they count as sent at the level the ramp heads for.
		l = max(l, int(c.cfg.Initial))
	}
	if n := len(w.limits); n > 0 && w.limits[n-1].limit == l {
		return
	}
	if len(w.limits) == limitHistory {
		w.limits = append(w.limits[:0], w.limits[limitHistory/2:]...)
	}
	w.limits = append(w.limits, limitAt{now, l})
}

// limitAtLocked returns the limit in force at t (the oldest known if t is
// older). It requires c.mu to be held.
func (c *Controller) limitAtLocked(t time.Time) int {
	w := &c.defaultRule.lat
	i := sort.Search(len(w.limits), func(i int) bool { return w.limits[i].at.After(t) })
	switch {
	case len(w.limits) == 0:
		return c.limitLocked()
	case i == 0:
		return w.limits[0].limit
	}
	return w.limits[i-1].limit
}

// observeLatencySignalLocked adds a fresh success, dispatched at
// dispatched, to its cohort, and judges the cohort once its fastest call
// is known. It requires c.mu to be held.
func (c *Controller) observeLatencySignalLocked(s Sample, dispatched time.Time) {
	w := &c.defaultRule.lat
	if s.InFlight > c.limitLocked() {
		// Draining after a cut: calls sent under the old limit still
		// load the provider and slow the new ones. Judge nothing.
		return
	}
	if w.width == 0 {
		if !c.hasLatency {
			return
		}
		w.width, w.epoch = max(time.Duration(c.latency*float64(time.Second)), time.Millisecond), dispatched
	}
	d := dispatched.Sub(w.epoch)
	if d < 0 {
		return
	}
	span := int64(d / w.width)
	co := &w.cohorts[span%cohortSlots]
	if co.span != span || co.n == 0 {
		if co.span > span {
			return // too late to be among its cohort's fastest
		}
		*co = cohort{span: span}
	}
	if co.judged {
		return
	}
	x := math.Max(s.Latency.Seconds(), 1e-9)
	sent := c.limitAtLocked(dispatched)
	if co.n == 0 {
		co.fastest, co.level, co.minLevel = x, sent, sent
	}
	co.fastest = math.Min(co.fastest, x)
	co.level, co.minLevel = max(co.level, sent), min(co.minLevel, sent)
	if co.n++; co.n < latencyWindow {
		return
	}
	co.judged = true
	c.judgeLocked(math.Log(co.fastest), float64(co.level), co.level <= co.minLevel+1)
}

// judgeLocked judges a cohort whose fastest call took e^lx under a limit
// of level. steady: the cohort's calls were all sent under about one
// limit, so its latency is that level's (in a slow start they are not). It
// requires c.mu to be held.
func (c *Controller) judgeLocked(lx, level float64, steady bool) {
	w := &c.defaultRule.lat
	if !w.based {
		w.logBase, w.spread, w.baseLevel, w.based = lx, initialSpread, level, true
		return
	}
	ratio := math.Exp(lx - w.logBase)
	w.last = ratio
	switch {
	case ratio < c.latencyThresholdLocked():
		if level <= baseLevelSlack*w.baseLevel {
			// A cohort at about the level of the baseline: the
			// baseline follows it. Cohorts well above it do not, or
			// latency that grows a little with each step up would
			// carry the baseline (and the threshold) with it.
			dev := math.Abs(lx - w.logBase)
			w.logBase += baseWeight * (lx - w.logBase)
			w.spread += baseWeight * (dev - w.spread)
			w.baseLevel += baseWeight * (level - w.baseLevel)
		}
	case steady && level <= w.baseLevel:
		// Slower at a level that was fine: not the lane's doing (the
		// provider got slower for everyone, or the calls got longer).
		// The new normal.
		w.logBase, w.baseLevel = lx, level
	}
}

// latencyExplodedLocked reports whether the fastest call of the lane's
// last cohort took explodedRatio times the baseline: its timeouts then
// mean collapse. It requires c.mu to be held.
func (c *Controller) latencyExplodedLocked() bool {
	return c.latencyOn() && c.defaultRule.lat.last >= explodedRatio
}
