package aimd

import (
	"math"
	"time"
)

// This file holds the Default preset. DESIGN.md states its rules and the
// reasoning behind them; the comments here say what each part does.

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
	// answers counts the calls that have succeeded since New, up to
	// Initial. Until Initial have, the lane is a newcomer: it has not had
	// as many calls answered as it started out asking for, so its 429s
	// say that others hold the capacity, not that a level it used has
	// become too much.
	answers int
	// reachedAt is when the limit last came back up to decrLevel (zero
	// while below it, or with no level remembered).
	reachedAt time.Time
	// The share clock: round trips (a fresh call dispatched after
	// rtStart succeeded) since the last congestion signal or yield.
	rtStart time.Time
	quiet   int
	// quietSince is when the share clock last restarted (New, a
	// congestion signal, a yield): a lane yields at most once every
	// yieldGap, however short its round trips.
	quietSince time.Time
	// yieldAt is when the lane last yielded (zero if never): like a
	// decrease, it makes the answers to calls dispatched before it stale.
	yieldAt time.Time
	// yieldFrom is the level of the last yield until the limit is back
	// at it, or a congestion signal comes (zero then). untaken: the
	// limit got back there with no congestion signal on the way, and
	// none has come since: nobody took what the lane gave back.
	yieldFrom float64
	untaken   bool
	// signalled: a congestion signal has come since New. Until one has,
	// or while the last yield went untaken, nothing says that anyone
	// wants the lane's slots (unsought).
	signalled bool
	// yieldHold is, after a yield of one call (unsought), the quiet round
	// trips the lane keeps that call's slot free before growing back
	// (zero otherwise).
	yieldHold int
	// stable: the last two decreases came at the same level, a ceiling
	// that stays put (prevLevel is the last one's level; prevProbe: it
	// came with a ceiling known, or from the start's ramp).
	stable    bool
	prevLevel float64
	prevProbe bool
	// moved: a ceiling the lane had found has moved since New: a call
	// succeeded above it, or a probe of it found another level. Such a
	// lane shares its provider or sees its capacity change, and does not
	// back off above Initial/2 (probeHoldLocked).
	moved bool
	// backoff makes the probe rarer at a ceiling found again and again:
	// a small 429 ceiling or a latency knee (probeHoldLocked).
	backoff ceilingBackoff
	// peak is the most calls in flight at a fresh in-use success, at
	// peakAt; it fades with time (recentPeakLocked).
	peak   float64
	peakAt time.Time
	// ledger is the calls let out in a slow start with no ceiling
	// (overdue.go); none once the lane has adopted a target decided
	// elsewhere (adopted).
	ledger  dispatchLedger
	adopted bool
	// lat is the latency signal (latency.go).
	lat  latencyState
	prof profile
	// ramped holds the calls the start let out before its last step,
	// with fewer calls in flight than Initial (profile.go).
	ramped profileBin
	// prof is the latency profile (profile.go); latencyCut: the last
	// decrease came from it; latencySeen: one has since New.
	latencyCut, latencySeen bool
	// ramp paces the lane's start (ramp.go).
	ramp rampState
}

// A ceilingKind is what found the ceiling a ceilingBackoff counts.
type ceilingKind uint8

const (
	noCeiling      ceilingKind = iota
	rateCeiling                // confirmed 429s at the same small level
	latencyCeiling             // latency cuts to the same profile bin
)

// A ceilingBackoff counts the decreases in a row that found one ceiling
// again: a confirmed 429 at the small level of the decrease before it
// (after backoffFinds of them), or a latency cut to the profile bin of
// the one before it (after latencyBackoffCuts). From then on every
// further find doubles the probe hold (probeHoldLocked). Any other
// decrease, a collapse or an adopted decrease ends it: one ceiling, of
// one kind, at a time.
type ceilingBackoff struct {
	kind      ceilingKind
	bin       int // the profile bin of a latencyCeiling
	finds     int // finds in a row after the first
	doublings int // of the probe hold
}

// find notes a find of the ceiling of kind k (in profile bin bin, for a
// latencyCeiling) that starts the doubling after `after` finds in a row.
func (b *ceilingBackoff) find(k ceilingKind, bin, after int) {
	if b.kind != k || b.bin != bin {
		*b = ceilingBackoff{kind: k, bin: bin}
		if k == rateCeiling {
			b.finds = 1 // found again: the level of the decrease before
		}
	} else {
		b.finds++
	}
	if b.finds >= after {
		b.doublings = min(b.doublings+1, maxBackoff)
	}
}

// doubled returns how many times the probe hold has doubled at a ceiling
// of kind k.
func (b *ceilingBackoff) doubled(k ceilingKind) int {
	if b.kind != k {
		return 0
	}
	return b.doublings
}

// Constants of the Default preset that are not in Config, chosen with the
// simulations (sim_test.go, sim_shared_test.go; see DESIGN.md).
const (
	// overshootSlack: a confirmed 429 at level L cuts the target to
	// max(target*DecreaseRatio, L-overshootSlack).
	overshootSlack = 2
	// yieldRounds quiet round trips make a lane yield yieldShare of its
	// calls in flight (one call, above Initial/yieldShare calls, while
	// nobody is known to want them: unsought).
	yieldRounds = 10
	yieldShare  = 0.3
	// yieldGap is the least time between two yields (or a congestion
	// signal and a yield), so that a provider that answers in a
	// millisecond does not make the lane yield every few milliseconds.
	yieldGap = time.Second
	// untakenStretch multiplies both the quiet round trips and yieldGap
	// before a yield of a lane of more than Initial/yieldShare calls
	// while its last yield went untaken: nobody was waiting for the
	// slots, so a lone lane yields half as often (figures in DESIGN.md,
	// "A yield nobody took").
	untakenStretch = 2
	// yieldProbeRounds is how many round trips a lane whose yield nobody
	// is known to want (unsought) keeps the one slot it gives back free:
	// a process that joins gets in if it asks meanwhile.
	yieldProbeRounds = 4
	// A lane whose limit is below recallRatio of its recent peak probes
	// after one clean round trip instead of the probe hold: capacity that
	// was there a moment ago often comes back. The peak fades by e every
	// peakMemory round trips, so a lane whose capacity stays low goes back
	// to the usual hold within about a minute of round trips.
	recallRatio = 0.7
	peakMemory  = 64
	// A lane that has found the ceiling of its last decrease again
	// backoffFinds times in a row, each 429 a confirmed cut, doubles its
	// probe hold from then on at every find: holding at most Initial/2,
	// up to backoffCalls calls (backoffCalls/limit round trips), so at
	// most one probe's 429 per backoffCalls calls. Holding more, only
	// while its ceilings have never moved (moved): up to backoffCalls
	// calls still at a limit of at most backoffShare × Initial (5 of 8);
	// above, where lanes sharing an account near their share (Initial)
	// live, up to ProbeHold round trips until the lane has found the
	// ceiling backoffAloneFinds times in a row (about 75 round trips at 8
	// calls), up to backoffCalls calls from then on.
	backoffFinds      = 5
	backoffCalls      = 64
	backoffShare      = 0.625
	backoffAloneFinds = 3 * backoffFinds
	// maxBackoff bounds the doublings (the hold reaches backoffCalls long
	// before).
	maxBackoff = 16
)

// probeHoldLocked is the number of clean round trips held just below the
// decrease level before probing above it: 1 + limit/3, at most ProbeHold,
// doubled at a ceiling found again and again (ceilingBackoff), but not
// beyond backoffCalls calls at a 429 ceiling (ProbeHold round trips above
// backoffShare × Initial until it has been found backoffAloneFinds times)
// or latencyHoldMax round trips at a latency knee; 1 while the limit is
// below recallRatio of the lane's recent peak. It requires c.mu to be
// held.
func (c *Controller) probeHoldLocked(now time.Time) int {
	limit := c.limitLocked()
	if float64(limit) < recallRatio*c.recentPeakLocked(now) {
		return 1
	}
	hold := min(c.cfg.ProbeHold, 1+limit/3)
	b := &c.defaultRule.backoff
	if n := b.doubled(rateCeiling); n > 0 {
		most := (backoffCalls + limit - 1) / limit
		if float64(limit) > backoffShare*c.cfg.Initial && (b.finds < backoffAloneFinds || c.defaultRule.moved) {
			// A lane near its share of a cap split among processes
			// finds the slots others free by probing: a lone lane's
			// ceiling looks the same from inside (see moved). Found
			// backoffAloneFinds times in a row and never moved, it backs
			// off as a lane at a smaller ceiling does: a split that has
			// held that long finds the slots a process that stops frees
			// a probe hold of backoffCalls calls later (DESIGN.md, "Above
			// 5/8 of Initial").
			most = min(most, c.cfg.ProbeHold)
		}
		hold = max(hold, min(hold<<n, most))
	}
	if n := b.doubled(latencyCeiling); n > 0 {
		hold = max(hold, min(hold<<n, latencyHoldMax))
	}
	return hold
}

// recentPeakLocked is the most calls the lane has had in flight at a
// fresh in-use success, faded by e every peakMemory round trips (latency
// EWMAs) since. It requires c.mu to be held.
func (c *Controller) recentPeakLocked(now time.Time) float64 {
	d := &c.defaultRule
	if d.peak == 0 || !c.hasLatency || c.latency <= 0 {
		return d.peak
	}
	return d.peak * math.Exp(-now.Sub(d.peakAt).Seconds()/(peakMemory*c.latency))
}

// newcomer reports whether fewer than Initial calls of the lane have
// succeeded since New (see answers).
func (d *defaultState) newcomer(cfg Config) bool { return float64(d.answers) < cfg.Initial }

func (d *defaultState) init(cfg Config, now time.Time) {
	d.quietSince = now
	d.ss = float64(cfg.Max) // no decrease yet: slow start up to Max
	d.confirmed = true
	d.initRamp(cfg, now)
}

// observeDefaultLocked requires c.mu to be held.
func (c *Controller) observeDefaultLocked(s Sample, now time.Time) Event {
	d := &c.defaultRule
	dispatched := s.Dispatched
	if dispatched.IsZero() {
		dispatched = now.Add(-s.Latency)
	}
	// A call dispatched at or before the last decrease was sent under the
	// old, higher limit: its answer says nothing about the current one.
	// This is TCP's "one reduction per window of data" (RFC 5681 §3.2,
	// RFC 6582): a burst of 429s caused by one overshoot is one decrease.
	fresh := (c.lastDecr.IsZero() || dispatched.After(c.lastDecr)) &&
		(d.yieldAt.IsZero() || dispatched.After(d.yieldAt))
	if s.Held {
		// The calls out may be waiting in the caller, not at the
		// provider: their silence says nothing (overdue.go).
		d.ledger.entries = d.ledger.entries[:0]
	}
	d.ledger.answer(dispatched)
	switch s.Outcome {
	case Success:
		c.observeLatencyLocked(s.Latency)
		d.streak = 0 // something got through: not a storm
		if d.newcomer(c.cfg) {
			d.answers++
		}
		if d.ramp.on {
			// The provider took a call of the lane: a refusal from now
			// on finds a ceiling, not a provider full before the lane
			// got anything in (rampRefusedLocked).
			d.ramp.admitted = max(d.ramp.admitted, 1)
		}
		if c.latencyOn() {
			// Answered, but slower than chance explains at a level the
			// lane still uses: the provider queues (profile.go).
			if to := c.profileLocked(s, dispatched, now); to > 0 {
				return c.latencyDecreaseLocked(to, now)
			}
			// The calls still out of a slow start with no ceiling, if
			// far fewer are back than the lowest level's latencies
			// (this answer's among them) make likely, say that the
			// provider queues them (overdue.go).
			if to := c.overdueLocked(now); to > 0 {
				return c.latencyDecreaseLocked(to, now)
			}
		}
		if !fresh {
			return None
		}
		d.ramp.burst = false
		d.rampAnsweredLocked(c.cfg)
		d.confirmed = true
		if c.latencyOn() {
			c.observeLatencySignalLocked(s, dispatched)
		}
		if !dispatched.Before(d.rtStart) {
			// A call sent after the share clock's round began is back.
			d.quiet++
			d.rtStart = now
			// A lane backed off at a small ceiling (see backoffFinds)
			// does not yield: as far as it can tell it is alone, and at
			// a limit of 2 to 4 a yield gives back one call in two to
			// four for a round trip.
			if c.yieldDueLocked(s, now) && d.backoff.doubled(rateCeiling) == 0 {
				if ev := c.yieldDefaultLocked(s, now); ev != None {
					return ev
				}
			}
		}
		// Grow only while the limit is what holds the lane back
		// (RFC 7661's "cwnd-limited"): otherwise an idle or lightly used
		// lane would wind its target up to Max and release a burst later.
		// Calls held by the caller for a provider's budget (Held) count
		// in InFlight but are not at the provider: the budget holds the
		// lane back, as a sender held by its pacer is not cwnd-limited
		// (Linux's tcp_is_cwnd_limited), and the limit stays near what
		// the provider holds instead of climbing to Max on answers that
		// say nothing of it. Such a sample still clocks the yields above:
		// each gives back a share of the calls in flight, held ones
		// included, so a limit that grew before the budget bound comes
		// down toward the calls the budget lets out.
		if s.Held || s.InFlight > 0 && s.InFlight < c.limitLocked() {
			return None
		}
		if d.yieldHold > 0 {
			// The slot a yield of one call freed stays free for
			// yieldProbeRounds round trips (yieldDefaultLocked).
			if d.quiet < d.yieldHold {
				return None
			}
			d.yieldHold = 0
		}
		if c.latencyOn() {
			slow := c.slownessLocked(s.Latency, now)
			if slow.beyond(growthSpreads) {
				// Answered, but so slowly that the provider is queueing
				// calls: no growth on that (profile.go), and
				// the end of a slow start that nothing else would stop
				// short of Max (HyStart++, RFC 9406, leaves slow start
				// on a rise of the round trip time too).
				if to := c.startExitLocked(slow, dispatched, now); to > 0 {
					return c.latencyDecreaseLocked(to, now)
				}
				return None
			}
		}
		return c.growDefaultLocked(s, dispatched, now)
	case RateLimited, Timeout:
		if s.Outcome == RateLimited && (d.ramp.on || d.ramp.burst) {
			ramping := d.ramp.on
			if ev, ok := c.rampRefusedLocked(s, fresh, now); ok {
				return ev
			}
			if ramping {
				// Refused before any call got in: a newcomer asking at
				// Initial, whatever it had out.
				s.InFlight = 0
			}
		}
		if s.Outcome == Timeout && c.latencyOn() {
			if to := c.profileLocked(s, dispatched, now); to > 0 && !c.latencyExplodedLocked() {
				return c.latencyDecreaseLocked(to, now)
			}
			if to := c.overdueLocked(now); to > 0 {
				return c.latencyDecreaseLocked(to, now)
			}
		}
		if !fresh {
			return None // explained by the last decrease or yield
		}
		d.restartShareClock(now) // not quiet: no yield due
		d.contested()
		if s.Outcome == Timeout && c.latencyExplodedLocked() {
			// Calls time out while those that still succeed take many
			// times what they did: the provider is drowning in calls (a
			// server that queues, far past its knee), even if some get
			// through. A collapse, as for a storm of 429s.
			level := c.refusedLevelLocked(s)
			c.lastDecr, c.decrCause = now, Timeout
			d.confirmed, d.probing, d.gain, d.reachedAt = false, false, 0, time.Time{}
			return c.collapseLocked(level)
		}
		return c.decreaseDefaultLocked(s, now)
	default:
		return None // Failure: not a congestion signal
	}
}

// growDefaultLocked applies one in-use success of a call dispatched after
// the last decrease. It requires c.mu to be held.
func (c *Controller) growDefaultLocked(s Sample, dispatched, now time.Time) Event {
	d := &c.defaultRule
	before := c.target
	if in := float64(s.InFlight); in >= c.recentPeakLocked(now) {
		d.peak, d.peakAt = in, now
	}
	if c.decrLevel > 0 && !d.latencyCut && !d.reachedAt.IsZero() && !dispatched.Before(d.reachedAt) && float64(s.InFlight) >= c.decrLevel {
		// A call sent once the limit was back at the level that failed
		// has succeeded with that many calls in flight: the provider
		// takes that level now. Capacity has grown: forget the level and
		// slow start (RFC 5681 §3.1) from here.
		c.capacityGrewLocked(now)
	}
	if c.target < d.ss {
		// Slow start (RFC 5681 §3.1): +1 per success doubles the target
		// every round trip, up to the threshold.
		// With no level remembered (the start, or capacity grew), +2:
		// the target triples every round trip. Against a hard cap the
		// overshoot is the same, one call answered 429 at once, and a
		// lane that just learnt that capacity grew gets there a round
		// trip sooner (S3's 8 -> 32).
		inc := 1.0
		if d.ss >= float64(c.cfg.Max) {
			inc = 2
		}
		c.target = math.Min(c.target+inc, d.ss)
	} else {
		jump := 0.0
		if !d.probing {
			d.probing, d.roundStart, d.roundLimit, d.rounds, d.gain = true, now, c.limitLocked(), 0, 0
			if d.skipHold {
				d.rounds = c.probeHoldLocked(now)
			}
		}
		if !dispatched.Before(d.roundStart) {
			// A call sent after the round began is back: one round trip.
			d.rounds++
			d.roundStart = now
			switch {
			case c.decrLevel > 0 && !d.latencyCut && float64(d.roundLimit) >= c.decrLevel:
				// A whole round trip ran at the level that failed, without
				// congestion: capacity has grown. Forget that level and
				// slow start again (from the next success).
				c.capacityGrewLocked(now)
			case d.rounds >= c.probeHoldLocked(now):
				// Probing, CUBIC-like (RFC 9438): flat near the level that
				// failed, then convex: the increase per round trip starts
				// at IncreaseStep and doubles every clean round trip, up
				// to slow start's.
				if d.gain == 0 {
					d.gain = c.cfg.IncreaseStep
					if d.stable && !d.skipHold {
						// The ceiling stayed put the last two times: ask
						// for one more call now rather than over a round
						// trip. Its answer comes a round trip sooner: a
						// 429 if the ceiling is still there, a success if
						// capacity grew (S3's 8 -> 32).
						jump = math.Floor(c.target) + 1
					}
				} else {
					d.gain *= 2
				}
				d.gain = math.Min(d.gain, c.target)
			}
			d.roundLimit = c.limitLocked()
		}
		// Congestion avoidance: +gain/target per success is +gain per
		// round trip when the whole limit is in use.
		c.target = math.Max(c.target+d.gain/c.target, jump)
	}
	// Nothing accumulates above Max.
	c.target = math.Min(c.target, float64(c.cfg.Max))
	if g := c.latencyGateLocked(now); c.latencyOn() && c.target > g {
		// The profile does not know the level below flat yet: wait for
		// it (never lowers the target).
		c.target = math.Max(before, g)
	}
	if c.decrLevel > 0 && d.reachedAt.IsZero() && float64(c.limitLocked()) >= c.decrLevel {
		d.reachedAt = now
	}
	if d.yieldFrom > 0 && float64(c.limitLocked()) >= d.yieldFrom {
		// Back at the level of the last yield, and no congestion signal
		// on the way: nobody took the slots it gave back.
		d.yieldFrom, d.untaken = 0, true
	}
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
	level := c.refusedLevelLocked(s)
	if d.streak > 0 && now.Sub(d.streakStart) <= c.cfg.CollapseWindow {
		d.streak++
	} else {
		d.streak, d.streakStart, d.streakLevel = 1, now, level
	}
	// unconfirmed: no call sent after the last decrease has succeeded.
	// repeat: no call at all has succeeded since (the storm streak), for
	// at least a typical latency: two 429s a millisecond apart, with the
	// lane's other calls still running, are not yet a storm.
	unconfirmed := !d.confirmed
	spanned := !c.hasLatency || now.Sub(d.streakStart).Seconds() >= c.latency
	repeat := d.streak > 1 && spanned
	if d.newcomer(c.cfg) && s.Outcome == RateLimited {
		// Fewer than Initial calls of the lane have ever got through, and
		// the provider says it is full: others hold the capacity (a
		// newcomer to a shared account), or it is not there yet. Neither
		// is a storm: the first 429 cuts gently, later ones change nothing
		// and the lane keeps asking at that level until Initial calls have
		// succeeded.
		d.streak = 0
		if c.decreases > 0 {
			return None
		}
		repeat, unconfirmed = false, false
	}
	if unconfirmed && !repeat && s.Outcome == RateLimited && c.target <= c.cfg.Initial {
		// At or below the level every lane starts at, a 429 before the
		// last cut was confirmed comes from others taking what the cut
		// freed: the lane is being squeezed out of a shared cap. Cutting
		// again would leave it too few calls to ever ask for a slot as
		// one frees up; it keeps asking at its level instead, and changes
		// nothing (not even the round trip: a fresh success must still be
		// able to confirm the cut, after which a 429 cuts again, so that
		// a lane alone above a small cap does come down to it).
		return None
	}
	c.lastDecr = now
	c.decrCause = s.Outcome
	d.latencyCut = false
	d.confirmed = false
	d.probing, d.gain = false, 0
	d.reachedAt = time.Time{}
	if d.streak >= c.cfg.CollapseThreshold && spanned {
		// A storm: CollapseThreshold decreases, each from a call sent
		// after the previous one, and nothing got through in between.
		return c.collapseLocked(d.streakLevel)
	}
	// taken: the ceiling came down since the last decrease. Alone under a
	// fixed cap, every decrease comes at the same level (one probe above
	// the cap); a lower one means that a slot this lane held and gave
	// back was taken by someone else sharing the provider.
	taken := d.prevLevel > 0 && level < d.prevLevel
	d.stable = level == d.prevLevel
	// probe: a ceiling was known, so this signal answers a probe of it
	// (not the overshoot of a slow start with none). Two in a row at
	// different levels: the ceiling moved.
	probe := d.ss < float64(c.cfg.Max)
	if probe && d.prevProbe && d.prevLevel > 0 && !d.stable {
		d.moved = true
	}
	d.prevLevel, d.prevProbe = level, probe
	if s.Outcome == RateLimited && d.stable && !unconfirmed && !repeat && (level-1 <= c.cfg.Initial/2 || !d.moved) {
		// The ceiling of the last decrease, found once more by a probe.
		d.backoff.find(rateCeiling, 0, backoffFinds)
	} else {
		d.backoff = ceilingBackoff{}
	}
	c.decrLevel = level
	c.collapsed = false // a decrease is a new operating point
	c.decreases++
	if repeat {
		// Nothing at all has succeeded since the previous cut, short of a
		// storm (only with CollapseThreshold above 2): cut hard, like
		// CUBIC's fast convergence but stronger, and probe from there at
		// once since the level that works is unknown.
		c.target = math.Max(1, c.target*c.cfg.RepeatDecreaseRatio)
		d.ss = c.target
		d.skipHold = true
	} else if unconfirmed {
		// Congestion again before a call sent after the last cut
		// succeeded, but calls sent before it still do: the cut was not
		// enough, or others sharing the provider took what it freed.
		// Cut by DecreaseRatio² (0.81) and probe from there at once,
		// since the level that works is unknown.
		c.target = math.Max(1, c.target*c.cfg.DecreaseRatio*c.cfg.DecreaseRatio)
		d.ss = c.target
		d.skipHold = true
	} else {
		// A fresh signal after a confirmed level, typically one probe too
		// many: cut gently (Netflix concurrency-limits' AIMDLimit backs off
		// by 0.9 too) and slow start back to just below the level that
		// failed, where probing holds for ProbeHold round trips.
		c.target = math.Max(1, c.target*c.cfg.DecreaseRatio)
		if s.Outcome == RateLimited {
			// A 429 from a hard cap means one call too many: above 20, a
			// cut of 10% frees more than the overshoot for the round
			// trip until the new level is confirmed. Free at most
			// overshootSlack slots.
			c.target = math.Max(c.target, level-overshootSlack)
			c.target = c.shareAboveInitialLocked(level, taken)
			if d.backoff.doubled(rateCeiling) > 0 {
				// A probe of a backed-off lane found the ceiling once
				// more: back below it at once, or a cut of 10% that
				// leaves the limit at the level (2.3 × 0.9 = 2.07)
				// costs a second 429.
				c.target = math.Max(1, math.Min(c.target, level-1))
			}
		}
		d.ss = math.Max(c.target, level-1)
		d.skipHold = false
	}
	return Decreased
}

// refusedLevelLocked is the level at which the congestion signal s
// showed: the limit, or fewer if fewer calls were at the provider (calls
// held unsent in their slots were not: Sample.Unsent). It requires c.mu
// to be held.
func (c *Controller) refusedLevelLocked(s Sample) float64 {
	level := float64(c.limitLocked())
	if n := s.atProvider(); n > 0 && float64(n) < level {
		level = float64(n)
	}
	return level
}

// collapseLocked stops the lane at 1 and slow-starts it back to half the
// pre-storm level, as TCP does after a retransmission timeout (RFC 5681
// §3.1: ssthresh = flight/2, cwnd = 1). It requires c.mu to be held.
func (c *Controller) collapseLocked(level float64) Event {
	d := &c.defaultRule
	c.target = 1
	c.decrLevel = level
	d.latencyCut = false
	d.ss = math.Max(1, math.Min(c.cfg.RepeatDecreaseRatio*level, float64(c.cfg.Max)))
	d.recoverTo = d.ss
	d.skipHold = false
	d.streak = 0
	d.backoff = ceilingBackoff{}
	c.collapsed = true
	c.collapses++
	return Collapsed
}

// shareAboveInitialLocked applies, after a confirmed 429 at level (one
// probe above the held level - 1), the rule that keeps a shared cap from
// freezing in an unfair split: a lane holding more than Initial gives
// back one slot (two when taken, the last slot it gave back having gone
// to someone else) until a fresh call succeeds, whatever the 10% cut
// would leave it; a lane at or below Initial keeps what it has. It returns
// the new target. It requires c.mu to be held.
func (c *Controller) shareAboveInitialLocked(level float64, taken bool) float64 {
	held := level - 1
	if held <= c.cfg.Initial {
		return c.target
	}
	give := 0.5 // the limit is the integer part: one slot below held
	if taken {
		give = 1.5
	}
	return math.Max(1, math.Min(c.target, held-give))
}

// capacityGrewLocked forgets the level that failed, the provider having
// taken it: the lane slow-starts (RFC 5681 §3.1) up to Max from here, its
// ceiling has moved, and its share clock counts from now. It requires c.mu
// to be held.
func (c *Controller) capacityGrewLocked(now time.Time) {
	d := &c.defaultRule
	d.ss, d.probing = float64(c.cfg.Max), false
	c.decrLevel = 0
	d.reachedAt = time.Time{} // read only while a level is remembered
	d.moved = true
	d.restartShareClock(now)
	c.rampGrewLocked()
}
