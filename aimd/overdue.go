package aimd

import (
	"math"
	"sort"
	"time"
)

// This file holds the Default preset's reading of the calls that have not
// come back yet. A slow start learns that a server queues its calls from
// their answers, and the calls it queued are the ones that answer last: a
// call let out past a knee of 8 with 16 calls in flight takes 4 times as
// long, and by the time it answers the limit has doubled again. Their
// silence tells sooner. A call out for a time t has a latency of at least
// t: when far fewer of the calls let out above the lowest known level are
// back than the latencies of that level's calls make likely, they are
// slow, and the slow start ends as on a far slower answer (profile.go,
// startExitLocked).
//
// The controller does not see calls leave: while the limit is in use,
// the caller fills each slot an answer frees and lets out one more call
// per step up of the limit, at once. So in a slow start with no ceiling
// it keeps a ledger of what went out after each answer (when, under which
// limit, how many) and matches each answer to its entry by the grant of
// its slot (Sample.Dispatched). Where it cannot count (the limit not in
// use, a 429's pause, calls held by the caller before it sends them
// (Sample.Held), a ceiling known, a limit shared with other processes
// through Adopt) it keeps no ledger.

// dispatchLedger is the calls let out in a slow start with no ceiling.
type dispatchLedger struct {
	entries []ledgerEntry // in time order
}

// ledgerEntry is n calls let out at at under limit level, of which
// answered have come back (any outcome).
type ledgerEntry struct {
	at          time.Time
	level       int
	n, answered int
}

const (
	// ledgerMax entries are kept at most (the oldest half dropped when
	// full), and none older than ledgerAge latency EWMAs: by then the
	// verdict on them is in.
	ledgerMax = 512
	ledgerAge = 4
	// overdueShare: calls back fewer than this share of those expected
	// (and fewer by startSpreads standard deviations) are overdue.
	overdueShare = 1.0 / 3
)

// add notes n calls let out at at under limit level.
func (l *dispatchLedger) add(at time.Time, level, n int) {
	if len(l.entries) == ledgerMax {
		l.entries = append(l.entries[:0], l.entries[ledgerMax/2:]...)
	}
	l.entries = append(l.entries, ledgerEntry{at: at, level: level, n: n})
}

// answer matches an answer to the call let out at dispatched: the latest
// entry at or before it with a call still out (nothing if there is none;
// a call goes out a little after its entry, as the grant of its slot
// follows the answer that freed it).
func (l *dispatchLedger) answer(dispatched time.Time) {
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].at.After(dispatched) })
	for j := i - 1; j >= 0; j-- {
		if e := &l.entries[j]; e.answered < e.n {
			e.answered++
			return
		}
	}
}

// startLedgerLocked opens the ledger of a lane's start: the caller lets
// out up to Initial calls at once. It requires c.mu to be held.
func (c *Controller) startLedgerLocked(now time.Time) {
	n := int(c.cfg.Initial)
	c.defaultRule.ledger.add(now, n, n)
}

// recordDispatchLocked notes the calls the caller lets out once the
// answer s has freed a slot and the limit, before under it, has become
// what it is. It requires c.mu to be held.
func (c *Controller) recordDispatchLocked(s Sample, before int, now time.Time) {
	d := &c.defaultRule
	l := &d.ledger
	if d.ss < float64(c.cfg.Max) || d.adopted || s.InFlight == 0 || s.InFlight < before || s.Outcome == RateLimited || s.Held {
		// A ceiling is known, the limit is shared with other processes
		// (Adopt), the caller does not count its calls, the limit was
		// not in use, a 429 pauses the lane, or the caller holds calls
		// before sending them: what goes out is not known.
		l.entries = l.entries[:0]
		return
	}
	limit := c.limitLocked()
	if n := limit - (s.InFlight - 1); n > 0 {
		l.add(now, limit, n)
	}
}

// overdueLocked returns, in a slow start with no ceiling, the level to cut
// to when the calls let out above the lowest known level's bin are far
// fewer back than that level's latencies make likely (see above): the
// highest bin known flat below them. Else, or before every call of the
// lowest level's bin is back (the first to come back are its fast ones),
// it returns 0. It requires c.mu to be held.
func (c *Controller) overdueLocked(now time.Time) float64 {
	d := &c.defaultRule
	l := &d.ledger
	if d.ss < float64(c.cfg.Max) || len(l.entries) == 0 || !c.hasLatency {
		return 0
	}
	memory := c.profileMemoryLocked()
	p := &d.prof
	base := p.baseline(now, memory, 0)
	if base == nil {
		return 0
	}
	mu, sd := base.mean, math.Sqrt(c.pooledVarianceLocked(base))
	if sd <= 0 {
		return 0
	}
	baseBin := binOf(base.level())
	old := now.Add(-time.Duration(ledgerAge * c.latency * float64(time.Second)))
	var expected, variance, back, slope float64
	low := 0
	pending := false
	keep := l.entries[:0]
	for _, x := range l.entries {
		if x.at.Before(old) {
			continue
		}
		keep = append(keep, x)
		if binOf(float64(x.level)) <= baseBin {
			pending = pending || x.answered < x.n
			continue
		}
		age := now.Sub(x.at).Seconds()
		if age <= 0 {
			continue
		}
		// The share of the lowest level's calls back within age.
		z := (math.Log(age) - mu) / sd
		f := 0.5 * math.Erfc(-z/math.Sqrt2)
		expected += float64(x.n) * f
		variance += float64(x.n) * f * (1 - f)
		slope += float64(x.n) * math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) // dexpected/dz
		back += float64(x.answered)
		if low == 0 || x.level < low {
			low = x.level
		}
	}
	l.entries = keep
	// The lowest bin's mean is known from a few calls: a mean fast by
	// chance shifts every expectation at once. Its variance, carried
	// through (the delta method), widens the test where the expected
	// count is most sensitive to it, calls near the median of their
	// age, and hardly at all for calls long past it.
	variance += slope * slope / float64(base.n)
	if pending || variance == 0 || back >= expected*overdueShare || back >= expected-startSpreads*math.Sqrt(variance) {
		return 0
	}
	return c.startCutLocked(binOf(float64(low)), now)
}
