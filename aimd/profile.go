package aimd

import (
	"math"
	"time"
)

// This file holds the Default preset's latency profile: how long calls
// take at each level of concurrency the lane has used. It tells latency
// that climbs with the lane's own concurrency (a provider that queues
// calls: vLLM, Ollama, a saturated gateway, which answer no 429) from
// latency that varies by itself (output length, a heavy tail), and finds
// the highest level at which latency stays flat. aimd/DESIGN.md has the
// measurements behind it.
//
// Every success and every timeout is filed under the limit its call was
// dispatched under, in bins a quarter of an octave wide (8, 9.5, 11.3,
// 13.5, 16, ...). A bin keeps the mean and the variance of the log of its
// calls' latencies. The baseline is the lowest bin known (the least
// concurrency recently used), once its slow calls are back. A bin is
// congested when its mean lies above the baseline's by more than
// LatencyTolerance and by more than profileZ standard errors of the
// difference: the test asks more of a heavy tail or of a mix of output
// lengths than of latency that hardly varies, and so reads no knee into
// them.
//
// A congested answer from a bin at or below the lane's limit cuts the
// limit to the highest bin known flat (one bin below the baseline if none
// is above it: the baseline itself may be past the knee, and only a lower
// level tells), to the level within it that a rise of latency with the
// square of the calls in flight puts at the baseline's (kneeIn). From the
// first such cut on, the limit grows into a bin only once the bin below
// it is known flat, and only to its first few levels: probing above the
// knee costs a few calls, for as long as it takes to fill a bin; cuts to
// the same bin again and again lengthen the probe hold. And a success
// slower than the lowest bin's calls by more than chance explains (a
// bin needs 8 calls before it is tested, and slow start puts 2 or 3 in
// each on its way up) does not grow the limit; in a slow start that has
// no ceiling to stop at, one slower by far ends it, with a cut to the
// highest bin known flat. The start's calls are filed under Initial; those
// it let out before its last step are also kept apart, and once the lane
// has cut on latency, a lowest bin slower than they were sends the lane
// to their level (belowLowestLocked).

const (
	// binsPerOctave: bins are a quarter of an octave (19%) wide;
	// profileBins of them cover levels 1 to 2^16.
	binsPerOctave = 4
	profileBins   = 64
	// profileMin calls in a bin make its mean known.
	profileMin = 8
	// profileZ standard errors of the difference of two bins' means:
	// less is chance, even tested at every answer (DESIGN.md, "The
	// latency profile", has what 3.5 let through).
	profileZ = 4
	// profileSettle latency EWMAs after its last call was dispatched, a
	// bin can be the baseline: its slow calls are back by then, so its
	// mean is not that of its fast calls only.
	profileSettle = 2
	// latencyBackoffCuts latency cuts in a row to one bin double the
	// probe hold at every further one, up to latencyHoldMax round trips.
	latencyBackoffCuts = 2
	latencyHoldMax     = 32
	// growthSpreads standard deviations of a call's log latency above the
	// lowest bin's mean, a success does not grow the limit; startSpreads
	// of them end a slow start that has no ceiling to stop it.
	growthSpreads = 3
	startSpreads  = 4
	// profileMemory latency EWMAs after its last call was dispatched, a
	// bin is forgotten: a level the lane no longer uses says nothing of
	// the provider now.
	profileMemory = 64
	// gateCalls: once the lane has cut on latency, it grows at most this
	// many levels past the first of the bin above the highest flat one
	// (latencyGateLocked).
	gateCalls = 2
)

// profile is the latency profile (see above).
type profile struct {
	bins [profileBins]profileBin
}

// profileBin holds what is known of the calls dispatched under the limits
// of one bin.
type profileBin struct {
	n        int
	mean, m2 float64   // of log latency in seconds (Welford)
	levels   float64   // sum of the limits its calls were sent under
	last     time.Time // the latest dispatch of its calls
}

// binOf returns the bin of the calls dispatched under limit level.
func binOf(level float64) int {
	b := int(math.Floor(math.Log2(math.Max(level, 1)) * binsPerOctave))
	return min(b, profileBins-1)
}

// level is the mean limit of b's calls.
func (b *profileBin) level() float64 { return b.levels / float64(b.n) }

func (b *profileBin) variance() float64 {
	if b.n < 2 {
		return 0
	}
	return b.m2 / float64(b.n-1)
}

// known reports whether b's mean is known and recent at now.
func (b *profileBin) known(now time.Time, memory time.Duration) bool {
	return b.n >= profileMin && now.Sub(b.last) <= memory
}

// add files a call dispatched at dispatched under limit level that took
// latency, forgetting what its bin knew if older than memory.
func (p *profile) add(level int, latency time.Duration, dispatched time.Time, memory time.Duration) *profileBin {
	b := &p.bins[binOf(float64(level))]
	b.file(level, latency, dispatched, memory)
	return b
}

// file adds a call dispatched at dispatched under limit level that took
// latency to b, forgetting what b knew if older than memory.
func (b *profileBin) file(level int, latency time.Duration, dispatched time.Time, memory time.Duration) {
	if b.n > 0 && dispatched.Sub(b.last) > memory {
		*b = profileBin{}
	}
	x := math.Log(math.Max(latency.Seconds(), 1e-9))
	b.n++
	d := x - b.mean
	b.mean += d / float64(b.n)
	b.m2 += d * (x - b.mean)
	b.levels += float64(level)
	if dispatched.After(b.last) {
		b.last = dispatched
	}
}

// congested reports whether b is slower than base by more than tolerance
// and than chance explains.
func congested(b, base *profileBin, tolerance float64) bool {
	d := b.mean - base.mean
	// The spread of latencies is about the same at every level; the
	// larger of the two estimates guards against one small by chance.
	v := math.Max(b.variance(), base.variance())
	se := math.Sqrt(v/float64(b.n) + v/float64(base.n))
	return d > math.Log(tolerance) && d > profileZ*se
}

// baseline returns the lowest known bin, or nil if there is none or if
// its slow calls may not be back (its last dispatch is less than settle
// before now).
func (p *profile) baseline(now time.Time, memory, settle time.Duration) *profileBin {
	for i := range p.bins {
		if b := &p.bins[i]; b.known(now, memory) {
			if now.Sub(b.last) < settle {
				return nil
			}
			return b
		}
	}
	return nil
}

// flatTop returns the index of the highest known bin below bin limit
// that is not congested against the lowest known bin (that bin's own
// index if none), and -1 if no bin is known.
func (p *profile) flatTop(limit int, tolerance float64, now time.Time, memory time.Duration) int {
	var base *profileBin
	top := -1
	for i := range p.bins[:limit] {
		b := &p.bins[i]
		if !b.known(now, memory) {
			continue
		}
		if base == nil {
			base, top = b, i
		} else if !congested(b, base, tolerance) {
			top = i
		}
	}
	return top
}

// profileMemoryLocked and profileSettleLocked are profileMemory and
// profileSettle latency EWMAs. They require c.mu to be held.
func (c *Controller) profileMemoryLocked() time.Duration {
	return time.Duration(profileMemory * c.latency * float64(time.Second))
}

func (c *Controller) profileSettleLocked() time.Duration {
	return time.Duration(profileSettle * c.latency * float64(time.Second))
}

// profileLocked files a success or a timeout in the lane's profile. If
// the call's bin is congested and the lane's limit is still in that bin
// or above, it returns the level to cut to (see above); else 0. It
// requires c.mu to be held.
func (c *Controller) profileLocked(s Sample, dispatched, now time.Time) float64 {
	d := &c.defaultRule
	if !c.hasLatency {
		return 0
	}
	memory := c.profileMemoryLocked()
	level := c.limitAtLocked(dispatched)
	bin := binOf(float64(level))
	b := d.prof.add(level, s.Latency, dispatched, memory)
	if !d.ramp.topAt.IsZero() && dispatched.Before(d.ramp.topAt) {
		d.ramped.file(d.ramp.lowTop, s.Latency, dispatched, memory)
	}
	if to := c.belowLowestLocked(now); to > 0 {
		return to
	}
	if b.n < profileMin || binOf(float64(c.limitLocked())) < bin {
		return 0
	}
	base := d.prof.baseline(now, memory, c.profileSettleLocked())
	if base == nil || base == b || !congested(b, base, c.cfg.LatencyTolerance) {
		return 0
	}
	top := d.prof.flatTop(bin, c.cfg.LatencyTolerance, now, memory)
	if top > binOf(base.level()) {
		return d.prof.kneeIn(top, base)
	}
	// Nothing above the baseline is flat, and nothing below it is
	// known: measure a bin lower.
	return base.level() * math.Exp2(-1.0/binsPerOctave)
}

// kneeIn returns the level within flat bin top, above base, to cut to:
// the level at which latency that rises with the square of the calls in
// flight (a server that queues them) would give base's, the bin's mean
// level times e^(-d/2) for a mean log latency d above base's; not above
// that mean, nor below the bin's lower edge. A bin reads flat while its
// calls are slower than base's by less than LatencyTolerance: at a knee
// k its calls up to 1.12 k do.
func (p *profile) kneeIn(top int, base *profileBin) float64 {
	b := &p.bins[top]
	lower := math.Exp2(float64(top) / binsPerOctave)
	d := math.Max(0, b.mean-base.mean)
	return math.Max(lower, b.level()*math.Exp(-d/2))
}

// belowLowestLocked returns the level to cut to when the lane, after a
// latency cut, runs at the lowest level it knows and that level is
// slower than the calls its start let out with fewer in flight, by more
// than LatencyTolerance and than chance explains: the knee lies below
// every level the profile knows (the start filed its calls under
// Initial, and against a knee below Initial all of them are past it). It
// cuts to the level of those calls, once; else it returns 0. It requires
// c.mu to be held.
func (c *Controller) belowLowestLocked(now time.Time) float64 {
	d := &c.defaultRule
	r := &d.ramped
	memory := c.profileMemoryLocked()
	if !d.latencySeen || r.n < 2 || now.Sub(r.last) > memory {
		return 0
	}
	base := d.prof.baseline(now, memory, 0)
	if base == nil || binOf(float64(c.limitLocked())) > binOf(base.level()) || r.level() >= base.level() {
		return 0
	}
	if !congested(base, r, c.cfg.LatencyTolerance) {
		return 0
	}
	to := r.level()
	*r = profileBin{}
	if to >= c.target {
		return 0
	}
	return to
}

// latencyGateLocked is the most the target may grow to once the lane has
// cut on latency: into the bin above the highest bin known flat, up to
// gateCalls levels past its first (its top, if sooner). A probe there is
// measured at the levels nearest the flat one, where it costs least if
// they are past the knee. It requires c.mu to be held.
func (c *Controller) latencyGateLocked(now time.Time) float64 {
	if !c.defaultRule.latencySeen || !c.hasLatency {
		return math.Inf(1)
	}
	top := c.defaultRule.prof.flatTop(profileBins, c.cfg.LatencyTolerance, now, c.profileMemoryLocked())
	if top < 0 {
		return math.Inf(1)
	}
	first := math.Ceil(math.Exp2(float64(top+1) / binsPerOctave))
	return math.Min(math.Exp2(float64(top+2)/binsPerOctave), first+gateCalls)
}

// latencyDecreaseLocked cuts the target to level, the highest the profile
// knows flat, and probes from there after the usual hold. It requires
// c.mu to be held.
func (c *Controller) latencyDecreaseLocked(level float64, now time.Time) Event {
	d := &c.defaultRule
	c.decrLevel = float64(c.limitLocked())
	c.target = math.Max(1, math.Min(c.target, level))
	// A cut to the bin of the last one: the knee stays put, and probing
	// above it again and again costs a bin's worth of slow calls each
	// time. latencyBackoffCuts such cuts in a row double the probe hold
	// at every further one (probeHoldLocked). This ends a back-off at a
	// 429 ceiling, as any other decrease does.
	d.backoff.find(latencyCeiling, binOf(c.target), latencyBackoffCuts)
	c.lastDecr, c.decrCause = now, Success
	d.latencyCut, d.latencySeen = true, true
	d.confirmed, d.probing, d.gain, d.reachedAt = false, false, 0, time.Time{}
	d.ss = c.target
	d.skipHold = false
	// The level the lane came down from was too much, not capacity to
	// recall.
	d.peak = 0
	c.collapsed = false
	c.decreases++
	d.restartShareClock(now)
	d.contested()
	return Decreased
}

// startExitLocked returns, for a success that ends the lane's slow start,
// the level to cut to; else 0. A slow start with no ceiling to stop it
// (the lane's start, or after capacity grew) ends at a success slower
// than the lowest known bin's calls by more than startSpreads standard
// deviations of a new call about their mean (slow, the success's
// slowness; see predicted), sent under a limit above that bin: the
// provider queues the calls slow start added, and every round trip more
// would triple the calls it queues. The level is the highest bin known
// flat below the call's (at least the lowest known). It requires c.mu to
// be held.
func (c *Controller) startExitLocked(slow slowness, dispatched, now time.Time) float64 {
	d := &c.defaultRule
	if d.ss < float64(c.cfg.Max) || !slow.predicted().beyond(startSpreads) {
		return 0
	}
	return c.startCutLocked(binOf(float64(c.limitAtLocked(dispatched))), now)
}

// startCutLocked returns the level a slow start that found the calls of
// bin queued is cut to: the highest bin known flat below bin (the lowest
// known at least; within it as kneeIn says, if above the lowest), if that
// is below the target; else 0. It requires c.mu
// to be held.
func (c *Controller) startCutLocked(bin int, now time.Time) float64 {
	p := &c.defaultRule.prof
	memory := c.profileMemoryLocked()
	top := p.flatTop(bin, c.cfg.LatencyTolerance, now, memory)
	if top < 0 || p.bins[top].level() >= c.target {
		return 0
	}
	if base := p.baseline(now, memory, 0); top > binOf(base.level()) {
		return p.kneeIn(top, base)
	}
	return p.bins[top].level()
}

// slowness is how much slower a success was than the calls of the lowest
// known bin: excess, its log latency above that bin's mean, against
// spread, the standard deviation of a call's log latency (the larger of
// that bin's and the one pooled over every bin), and tolerance, the log
// of LatencyTolerance; n is the count of that bin's calls. known is false
// without such a bin.
type slowness struct {
	known                     bool
	excess, spread, tolerance float64
	n                         int
}

// predicted returns s with the error of the lowest bin's mean added to
// its spread: how far one new call's log latency lies from a mean known
// from n calls, by chance (a prediction interval, σ·√(1 + 1/n)). The
// slow start's exit, which cuts a lane that may be at Max back to the
// lowest level, asks for that evidence, as the overdue test does: with 8
// calls fast by chance in the lowest bin, every answer above it reads
// slower than it is.
func (s slowness) predicted() slowness {
	if s.n > 0 {
		s.spread *= math.Sqrt(1 + 1/float64(s.n))
	}
	return s
}

// beyond reports whether the success took longer than the lowest bin's
// calls by more than LatencyTolerance and by more than spreads standard
// deviations: the provider has started to queue the calls the lane just
// added.
func (s slowness) beyond(spreads float64) bool {
	return s.known && s.excess > s.tolerance && s.excess > spreads*s.spread
}

// slownessLocked returns the slowness of a success that took latency. It
// requires c.mu to be held.
func (c *Controller) slownessLocked(latency time.Duration, now time.Time) slowness {
	if !c.hasLatency {
		return slowness{}
	}
	p := &c.defaultRule.prof
	base := p.baseline(now, c.profileMemoryLocked(), 0)
	if base == nil {
		return slowness{}
	}
	return slowness{
		known:     true,
		excess:    math.Log(math.Max(latency.Seconds(), 1e-9)) - base.mean,
		spread:    math.Sqrt(c.pooledVarianceLocked(base)),
		tolerance: math.Log(c.cfg.LatencyTolerance),
		n:         base.n,
	}
}

// pooledVarianceLocked is the variance of a call's log latency: the
// larger of base's and the one pooled over every bin. It requires c.mu to
// be held.
func (c *Controller) pooledVarianceLocked(base *profileBin) float64 {
	p := &c.defaultRule.prof
	var m2 float64
	var df int
	for i := range p.bins {
		if b := &p.bins[i]; b.n >= 2 {
			m2 += b.m2
			df += b.n - 1
		}
	}
	if df == 0 {
		return base.variance()
	}
	return math.Max(base.variance(), m2/float64(df))
}
