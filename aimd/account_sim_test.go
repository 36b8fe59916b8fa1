package aimd

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// The accounting of 429s: every call a simulated lane lets out is
// classified by what the lane knew when it let it out, and every answer
// counted under that class, refused or not. A class whose calls are all
// refused in a lane alone under a cap carries no news there; whether it
// does where lanes share a cap shows in S4's count of its successes.
// DESIGN.md ("Where the 429s of the small cells come from") quotes it.

var account429 = flag.Int("account-429", 0, "seeds of TestAccount429 (0: skip); classifies every 429 of govbench's small-cap cells and of S4")

// sendClass is what a lane knew of the level of a call it let out.
type sendClass uint8

const (
	// The start: a step of the admission ramp; a call let out at the
	// same instant as the step's first.
	classRampFind sendClass = iota
	classRampSame
	// The first slow start above Initial with no ceiling known: the
	// first call let out above what the lane held, or one let out at the
	// same instant as it.
	classSlowFind
	classSlowSame
	// A newcomer asking above what it holds.
	classNewcomer
	// A call let out at or above a level refused less than a round
	// trip ago (no call let out after that refusal has been answered
	// yet): a re-ask, at an answer, or at a Retry-After pause's end
	// (no answer at that instant).
	classReask
	classReaskPause
	// A probe of a known ceiling (the level of the last decrease): held
	// as usual, or backed off.
	classProbe
	classProbeBackedOff
	// Any other call: below every level known to fail.
	classBelow
	numClasses
)

var classNames = [numClasses]string{
	"start: a step's first call", "start: the same step's others",
	"slow start: first above", "slow start: the same instant",
	"newcomer ask", "re-ask within a round trip of a refusal", "re-ask at a pause's end",
	"probe", "probe, backed off", "below the ceiling",
}

// laneAccount classifies the calls of one lane.
type laneAccount struct {
	sent map[uint64]sendClass
	// lastSent and same: the instant of the last call let out, and how
	// many were let out at it before the last one.
	lastSent time.Duration
	same     int
	// refused is the lowest level (calls in flight at the lane when it
	// was let out) of a 429 whose round trip has not ended, at refusedAt
	// (0: none).
	refused   int
	refusedAt time.Duration
	// answeredAt is the instant of the lane's last answer.
	answeredAt time.Duration
	sentAt     map[uint64]time.Duration
	level      map[uint64]int
	// counts of 429s and successes per class.
	refusals, successes [numClasses]int
}

func newLaneAccount() *laneAccount {
	return &laneAccount{sent: map[uint64]sendClass{}, sentAt: map[uint64]time.Duration{}, level: map[uint64]int{}, lastSent: -1, answeredAt: -1}
}

func (a *laneAccount) let(ctl *Controller, now time.Duration, call uint64, inFlight int) {
	d := &ctl.defaultRule
	if now == a.lastSent {
		a.same++
	} else {
		a.lastSent, a.same = now, 0
	}
	var c sendClass
	switch {
	case d.ramp.on && a.same == 0:
		c = classRampFind
	case d.ramp.on:
		c = classRampSame
	case a.refused > 0 && inFlight >= a.refused && now != a.answeredAt:
		c = classReaskPause
	case a.refused > 0 && inFlight >= a.refused:
		c = classReask
	case ctl.decrLevel > 0 && float64(inFlight) >= ctl.decrLevel && d.backoff.doubled(rateCeiling) > 0:
		c = classProbeBackedOff
	case ctl.decrLevel > 0 && float64(inFlight) >= ctl.decrLevel:
		c = classProbe
	case ctl.decrLevel == 0 && float64(inFlight) > ctl.cfg.Initial && a.same > 0 && inFlight > ctl.limitLocked()-a.same:
		c = classSlowSame
	case ctl.decrLevel == 0 && float64(inFlight) > ctl.cfg.Initial:
		c = classSlowFind
	case d.newcomer(ctl.cfg) && ctl.decreases > 0:
		c = classNewcomer
	default:
		c = classBelow
	}
	a.sent[call], a.sentAt[call], a.level[call] = c, now, inFlight
}

func (a *laneAccount) answered(now time.Duration, call uint64, o Outcome) (sendClass, bool) {
	c, ok := a.sent[call]
	if !ok {
		return 0, false
	}
	a.answeredAt = now
	at, level := a.sentAt[call], a.level[call]
	delete(a.sent, call)
	delete(a.sentAt, call)
	delete(a.level, call)
	if o != RateLimited {
		a.successes[c]++
		if a.refused > 0 && at > a.refusedAt {
			a.refused = 0 // a round trip has passed since the refusal
		}
		return c, true
	}
	a.refusals[c]++
	if a.refused == 0 || level < a.refused {
		a.refused = level
	}
	a.refusedAt = now
	return c, true
}

// accountSummary returns the classes' 429s per 100 of calls and per
// run (runs runs), and the share of each class's calls that succeeded.
func accountSummary(accs []*laneAccount, calls, runs int) string {
	var r, s [numClasses]int
	for _, a := range accs {
		for c := range numClasses {
			r[c] += a.refusals[c]
			s[c] += a.successes[c]
		}
	}
	order := make([]int, numClasses)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return r[order[i]] > r[order[j]] })
	var parts []string
	for _, c := range order {
		if r[c] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f, %.2f a run (%d%% of its calls in)", classNames[c],
			100*float64(r[c])/float64(calls), float64(r[c])/float64(runs), 100*s[c]/(r[c]+s[c])))
	}
	return strings.Join(parts, "; ")
}

// TestAccount429 classifies every 429 of govbench's matrix cells at
// small caps (100 ms, 500 ms and 5 s calls) and of S4 by what the lane
// knew when it let the call out. Run with -account-429 SEEDS -v.
func TestAccount429(t *testing.T) {
	if *account429 == 0 {
		t.Skip("run with -account-429 SEEDS -v")
	}
	seeds := uint64(*account429)
	for _, lat := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second} {
		for _, c := range []int{1, 2, 4, 8} {
			var accs []*laneAccount
			calls, refused := 0, 0
			for seed := uint64(1); seed <= seeds; seed++ {
				p := scenario("cap16", 480*time.Millisecond, seed)
				p.Caps, p.Hint = []int{c}, time.Second
				p.Latency, p.Calls, p.Clients = lat, max(64, 30*c), max(64, 2*c)
				a := newLaneAccount()
				accs = append(accs, a)
				p.Sent = func(ctl *Controller, now time.Duration, call, inFlight int) {
					a.let(ctl, now, uint64(call)+1, inFlight)
				}
				p.Answered = func(_ *Controller, now time.Duration, call int, o Outcome, _ Event) {
					a.answered(now, uint64(call)+1, o)
				}
				r := simulate(simConfig(Default), p)
				calls += p.Calls
				refused += r.Rejected
			}
			t.Logf("cell cap %d %v: %.2f 429s per 100 calls: %s", c, lat, 100*float64(refused)/float64(calls), accountSummary(accs, calls, int(seeds)))
		}
	}
	var accs []*laneAccount
	calls := 0
	// S4's lanes ranked in each seed by their calls answered, fewest
	// first: the calls and 429s of each rank.
	var rankCalls, rankRefused [4]int
	for seed := uint64(1); seed <= seeds; seed++ {
		p := s4Params(seed)
		lanes := make([]*laneAccount, len(p.Starts))
		for i := range lanes {
			lanes[i] = newLaneAccount()
		}
		accs = append(accs, lanes...)
		var answered, refused [4]int
		p.Sent = func(lane int, ctl *Controller, now time.Duration, call uint64, inFlight int) {
			lanes[lane].let(ctl, now, call, inFlight)
		}
		p.Answered = func(lane int, _ *Controller, now time.Duration, call uint64, o Outcome, _ Event) {
			switch o {
			case Success:
				calls++
				answered[lane]++
			case RateLimited:
				refused[lane]++
			}
			lanes[lane].answered(now, call, o)
		}
		simulateShared(simConfig(Default), p)
		rank := []int{0, 1, 2, 3}
		sort.Slice(rank, func(i, j int) bool { return answered[rank[i]] < answered[rank[j]] })
		for k, lane := range rank {
			rankCalls[k] += answered[lane] + refused[lane]
			rankRefused[k] += refused[lane]
		}
	}
	t.Logf("S4: %s", accountSummary(accs, calls, int(seeds)))
	var ranks []string
	for k := range rankCalls {
		ranks = append(ranks, fmt.Sprintf("%.2f of %d calls a run", 100*float64(rankRefused[k])/float64(rankCalls[k]), rankCalls[k]/int(seeds)))
	}
	t.Logf("S4, 429s per 100 of a lane's calls, lanes ranked by calls answered, fewest first: %s", strings.Join(ranks, "; "))
}

var accountGoodput = flag.Int("account-goodput", 0, "seeds of TestAccountGoodput (0: skip); where govbench's large cells lose goodput")

// idleClass is what a lane alone under a cap was doing while part of the
// cap stood idle.
type idleClass uint8

const (
	idleRamp  idleClass = iota // the admission ramp
	idleWait                   // the ramp's calls out, none answered yet
	idleClimb                  // the first slow start, until the cap is first full
	idleYield                  // a yield, until the cap is full again
	idleCut                    // a decrease, until the cap is full again
	idleTail                   // every call has been let out: the last calls
	idleOther                  // anything else (a Retry-After pause, a call's gap)
	numIdle
)

var idleNames = [numIdle]string{"start ramp", "first answers awaited", "first slow start", "yields", "cuts", "last calls", "other"}

// idleAccount integrates the idle part of a cap (cap less the calls at the
// provider) over a simulated run, by what the lane was doing.
type idleAccount struct {
	cap, calls   int
	n            int // calls at the lane
	sent         map[int]bool
	last         time.Duration
	full         bool // the cap has been full once
	answered     bool // a call has succeeded
	yielding     bool
	cutting      bool
	idle         [numIdle]float64 // slot-seconds
	busy         float64          // slot-seconds of calls answered
	yields, cuts int
}

func (a *idleAccount) class(ctl *Controller) idleClass {
	switch {
	case len(a.sent) >= a.calls:
		return idleTail
	case ctl.defaultRule.ramp.on:
		return idleRamp
	case !a.answered:
		return idleWait
	case !a.full:
		return idleClimb
	case a.yielding:
		return idleYield
	case a.cutting:
		return idleCut
	}
	return idleOther
}

// advance accounts the idle slots from the last event to now, in the
// class the lane was in since then.
func (a *idleAccount) advance(ctl *Controller, now time.Duration) {
	if free := a.cap - min(a.n, a.cap); free > 0 {
		a.idle[a.class(ctl)] += float64(free) * (now - a.last).Seconds()
	}
	a.last = now
}

func (a *idleAccount) settle() {
	if a.n >= a.cap {
		a.full, a.yielding, a.cutting = true, false, false
	}
}

// TestAccountGoodput splits the goodput govbench's large cells lose (a
// lane alone under a cap of 64 at its Max, or of 256 under a Max of 512,
// max(64, 2·cap) clients, 100 ms calls, 30 and 120 round trips of work)
// into where the cap stood idle: each class's idle slot-seconds as a
// share of cap × the optimum's makespan. Busy (calls' mean latency,
// above the median the optimum uses) plus every class is the makespan
// over the optimum; goodput is its inverse. Run with -account-goodput
// SEEDS -v. DESIGN.md ("Where the large cells lose, slot by slot")
// quotes it.
func TestAccountGoodput(t *testing.T) {
	if *accountGoodput == 0 {
		t.Skip("run with -account-goodput SEEDS -v")
	}
	seeds := *accountGoodput
	for _, c := range []int{64, 256} {
		for _, rounds := range []int{30, 120} {
			var sum [numIdle]float64
			var busy, goodput, yields, cuts float64
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				p := scenario("cap16", 480*time.Millisecond, seed)
				p.Caps, p.Sigma, p.Hint = []int{c}, 0.2, time.Second
				p.Latency, p.Calls, p.Clients = 100*time.Millisecond, rounds*c, 2*c
				cfg := simConfig(Default)
				if c > 64 {
					cfg.Max = 2 * c
				}
				a := &idleAccount{cap: c, calls: p.Calls, sent: map[int]bool{}}
				sentAt := map[int]time.Duration{}
				p.Sent = func(ctl *Controller, now time.Duration, call, inFlight int) {
					a.advance(ctl, now)
					a.n = inFlight
					a.sent[call] = true
					sentAt[call] = now
					a.settle()
				}
				p.Answered = func(ctl *Controller, now time.Duration, call int, o Outcome, ev Event) {
					a.advance(ctl, now)
					a.n--
					if o == Success {
						a.answered = true
						a.busy += (now - sentAt[call]).Seconds()
					}
					switch ev {
					case Yielded:
						a.yielding, a.cutting = true, false
						a.yields++
					case Decreased, Collapsed:
						a.cutting, a.yielding = true, false
						a.cuts++
					}
				}
				r := simulate(cfg, p)
				whole := float64(c) * r.Optimum.Seconds()
				for k := range numIdle {
					sum[k] += a.idle[k] / whole
				}
				busy += a.busy / whole
				goodput += r.Goodput
				yields += float64(a.yields)
				cuts += float64(a.cuts)
			}
			n := float64(seeds)
			parts := []string{fmt.Sprintf("busy %.3f", busy/n)}
			for k := range numIdle {
				parts = append(parts, fmt.Sprintf("%s %.3f", idleNames[k], sum[k]/n))
			}
			t.Logf("cell %d, %d rounds: goodput %.3f, %.1f yields, %.1f cuts a run; makespan/optimum: %s",
				c, rounds, goodput/n, yields/n, cuts/n, strings.Join(parts, ", "))
		}
	}
}
