package lane

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Coordinator shares lanes with the other Governors that govern them (the
// replicas of a service calling one provider account). Package coord
// implements it over Redis; cmd/governor wires it in when configured. With
// no Coordinator a Registry governs its lanes alone and starts nothing for
// it.
//
// Every method must return quickly (within a configured timeout) and fail
// rather than wait: a failure means the lanes go on alone.
type Coordinator interface {
	// Sync sends one report per lane and returns each lane's shared
	// state, in the same order.
	Sync(ctx context.Context, reports []Report) ([]Shared, error)
	// Reserve books one dispatch on a lane's shared token bucket (rate per
	// second, burst) and returns how long the call must wait.
	Reserve(ctx context.Context, lane string, rate, burst float64) (time.Duration, error)
	// Up reports whether coordination is on.
	Up() bool
	// Cause says why coordination is off, in a word (package coord's
	// causes: auth, noperm, refused, timeout ...); empty while it is on.
	Cause() string
	// Leave gives this Governor's shares of the lanes back (shutdown, or
	// a lane evicted).
	Leave(ctx context.Context, lanes []string) error
}

// Report is what this Governor tells the others about a lane. Its fields
// mirror coord.Report, field for field.
type Report struct {
	Lane               string        // the lane id, free of credentials
	Max                int           // upper bound of the target
	Initial            float64       // the target a lane with no shared state starts from
	Increase           float64       // the local controller's increase since the last sync
	SeenDecrease       time.Time     // the shared last decrease adopted last
	Decreased          bool          // the local controller decreased since the last sync:
	Collapsed          bool          // by a collapse,
	DecreaseTarget     float64       // to this target,
	DecreaseDispatched time.Time     // for a call dispatched then,
	DecreaseAt         time.Time     // at this instant,
	DecreaseLevel      float64       // at this level
	Demand, InFlight   int           // calls in flight plus queued; in flight
	PausedUntil        time.Time     // the provider's Retry-After, if any,
	PausedAt           time.Time     // given then
	LastSuccess        time.Time     // the lane's last successful call here
	Rate, Burst        float64       // the pacing learned from rate-limit headers, if any
	Latency            time.Duration // the lane's round-trip time (latency EWMA), if known
	DecreaseRatio      float64       // the controller's gentle cut
	Parked             bool          // idle: no share, a sync before any dispatch
}

// Shared is a lane's shared state. Its fields mirror coord.Shared, field
// for field.
type Shared struct {
	Target float64
	// LastDecrease is the instant of the last decrease the record took,
	// to the millisecond: a Report's DecreaseAt, truncated, when the
	// record took that report's decrease.
	LastDecrease  time.Time
	DecreaseLevel float64
	PausedUntil   time.Time
	PausedAt      time.Time
	Rate, Burst   float64
	Members       int // live Governors on the lane
	Share         int // what this Governor may use of the shared limit now
	Fair          int // its fair part, the others' calls not counted (see adopt)
	// OthersSynced: every other Governor has synced since (the sync's
	// instant if there are none; zero if unknown).
	OthersSynced time.Time
}

// laneCoord is a lane's coordination state, guarded by the lane's mu.
type laneCoord struct {
	kick  chan struct{} // asks the sync loop for a sync now
	coord Coordinator
	// parkEvery is how often the lane syncs while parked: between half of
	// parkedSync and all of it, by its id, so that lanes parked together
	// do not all sync at the same tick.
	parkEvery time.Duration

	joined       bool      // the last sync succeeded: the queue's limit is the share
	everJoined   bool      // a sync succeeded once (the first is logged at info level)
	starting     bool      // not yet synced: the queue is held (see Registry.newLaneLocked)
	held         bool      // the queue is held: no share
	share        int       // this Governor's part of the shared limit
	members      int       // live Governors at the last sync
	sharedTarget float64   // the shared target at the last sync
	base         float64   // the controller's target as last adopted
	decCount     uint64    // decreases and collapses reported so far
	seenDec      time.Time // the shared last decrease at the last sync
	// decDispatched is the dispatch of the call behind the last decrease.
	decDispatched time.Time
	collapsed     bool      // the last decrease was a collapse
	pendingPause  time.Time // a pause not yet sent,
	pendingAt     time.Time // asked for then
	lastOK        time.Time // the last success of the lane's calls
	remotePause   time.Time // the pause last taken from another Governor
	seenPause     time.Time // the latest pause applied or sent
	rate, burst   float64   // the shared pacing
	demands       []shareAt // the demands of the last syncs (see peakDemand)
	// shares are the shares the last syncs gave, newest last, for
	// grownShare.
	shares []shareAt
	// parked is set while the lane is idle and synced at the slow pace
	// (see parkedSync): it holds no share and its queue's limit is 0; a
	// call that takes it (Registry.Get) unparks it and asks for a sync.
	parked   atomic.Bool
	parkedAt time.Time // its last sync while parked
	// waking is set from the lane's parking to its next sync unparked.
	waking bool
	// unshared is set from the lane's parking until a sync gives it a
	// share, or one fails: its queue's limit is 0 meanwhile, so that no
	// call goes out before that sync, however late it lands (see
	// queueLimitLocked).
	unshared bool
}

// queueLimitLocked is the queue's limit of a coordinated lane: its share,
// or 0 while it is unshared. A share of 0 otherwise means a limit of 1,
// the queue held meanwhile for a grace at most (see holdLocked). It
// requires the lane's mu to be held.
func (c *laneCoord) queueLimitLocked() int {
	if c.unshared {
		return 0
	}
	return max(1, c.share)
}

// parkAfter is how long a lane must have been unused, with nothing to
// report, before it parks; parkedSync how often a parked lane syncs: a
// third of the lease, so its lease never lapses.
func parkAfter(lease time.Duration) time.Duration  { return lease / 3 }
func parkedSync(lease time.Duration) time.Duration { return lease / 3 }

// shareAt is the share a sync gave at an instant.
type shareAt struct {
	at    time.Time
	share int
}

// grownShare returns the share this Governor may use now, given the share
// s that the sync at now gave it, and records s. A smaller share applies at
// once; a larger one only once every other Governor has synced since it was
// given (at cut, every other Governor had synced since), that is, the least
// of the shares given since the newest sync at or before cut, that one
// included. The slots a Governor gains are the slots another lost, or a
// target that grew: the others give theirs up at their next sync, and until
// then both would use them, over the cap. (A Governor joining takes its
// share from the others; a remainder that turns moves one slot from one to
// another.) Without a sync at or before cut, from is the share: the lane's
// limit before it joined.
//
// grownShare requires the lane's mu to be held.
func (c *laneCoord) grownShare(s int, now, cut time.Time, from int) int {
	k, found := 0, false // the syncs before cut, but the newest of them, are dropped
	for i, e := range c.shares {
		if !e.at.After(cut) {
			k, found = i, true
		}
	}
	c.shares = append(c.shares[:0], c.shares[k:]...)
	use := s
	if !found {
		use = min(use, from)
	}
	for _, e := range c.shares {
		use = min(use, e.share)
	}
	c.shares = append(c.shares, shareAt{now, s})
	return use
}

// signal asks the sync loop for a sync now, without waiting.
func (c *laneCoord) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// ctrlInFlight maps the calls in flight in this Governor to what the
// controller, whose limit is the shared one, should see: the calls in
// flight in every Governor, estimated as the same part of the shared limit
// the shares were computed from (synced) as this Governor's part of its
// share. So the lane counts as in use, and may grow, when this Governor
// uses its whole share, but only up to the limit the shares give out: a
// controller that grew since the last sync waits for the next before it
// grows again (else every Governor would count its growth as in use, and
// the shared target would run far ahead of what is dispatched), and a
// decrease's level is what was in flight, not a target not yet used.
func ctrlInFlight(inFlight, share, synced, limit int) int {
	share, synced = max(share, 1), max(synced, 1)
	n := inFlight * synced / share
	if inFlight >= share {
		n = max(n, synced)
	}
	return max(1, min(n, limit))
}

// peakDemand returns the demand to report, given d, the calls in flight
// and queued now: the most seen at the syncs of the last memory, but at
// most demandDip above d. It rises at once; a dip of a call or two is held
// for memory (in a closed loop, a client between two calls is no demand
// gone, and a share that shrank for it and grew back would wait for the
// others: see grownShare), and a larger fall is taken at once but for those
// two (clients that stopped: their slots go to the others).
//
// peakDemand requires the lane's mu to be held.
func (c *laneCoord) peakDemand(d int, now time.Time, memory time.Duration) int {
	cut := now.Add(-memory)
	k := 0
	for k < len(c.demands) && c.demands[k].at.Before(cut) {
		k++
	}
	c.demands = append(c.demands[:0], c.demands[k:]...)
	c.demands = append(c.demands, shareAt{now, d})
	peak := d
	for _, e := range c.demands {
		peak = max(peak, e.share)
	}
	return min(peak, d+demandDip)
}

// demandDip is the largest fall of the demand that peakDemand holds.
const demandDip = 2

// demandMemory is how long a demand reported stands, in sync intervals:
// the two syncs before this one. A client between two calls is back within
// a millisecond or so, so a dip is seen at one sync, rarely two; a Governor
// whose clients stopped gives their slots back within a few syncs.
const demandMemory = 2.5

// syncSnap is what report saw, for adopt to know what changed since.
type syncSnap struct {
	at     time.Time // the report's instant
	target float64
	decs   uint64
	pause  time.Time
	decAt  time.Time // the decrease reported, if any
	parked bool      // the report parks the lane
	used   int64     // the lane's last use then (Lane.lastUsed)
}

// report is the lane's report for a sync.
func (l *Lane) report(maxTarget int, now time.Time, memory, lease time.Duration) (Report, syncSnap) {
	qs := l.q.Stats()
	rate, burst := l.pace.learned(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	co := l.co
	st := l.ctrl.State()
	decs := st.Decreases + st.Collapses
	demand := co.peakDemand(qs.InFlight+qs.Waiting, now, memory)
	r := Report{Lane: l.id, Max: maxTarget, Initial: st.Target, Demand: demand, InFlight: qs.InFlight,
		PausedUntil: co.pendingPause, PausedAt: co.pendingAt, LastSuccess: co.lastOK, Rate: rate, Burst: burst, SeenDecrease: co.seenDec,
		Latency: st.LatencyEWMA, DecreaseRatio: l.ctrl.Config().DecreaseRatio}
	switch {
	case !co.joined:
		// Joining, or rejoining after Redis was lost: the local target
		// is a share; if Redis lost the lane too, the Governors seen last
		// time restart it from about their sum.
		r.Initial = st.Target * float64(max(1, co.members))
	case decs != co.decCount:
		r.Decreased, r.Collapsed, r.DecreaseTarget, r.DecreaseDispatched, r.DecreaseAt, r.DecreaseLevel =
			true, co.collapsed, st.Target, co.decDispatched, st.LastDecrease, st.DecreaseLevel
	default:
		r.Increase = max(0, st.Target-co.base)
	}
	used := l.lastUsed.Load()
	r.Parked = l.parkLocked(r, now, used, lease)
	return r, syncSnap{at: now, target: st.Target, decs: decs, pause: co.pendingPause, decAt: r.DecreaseAt, parked: r.Parked, used: used}
}

// parkLocked reports whether the lane, joined, idle for parkAfter since
// used and with nothing to report, parks at this sync; if so its queue's
// limit is 0 first, so that no call is let out between this report and
// its adoption. It requires l.mu to be held.
func (l *Lane) parkLocked(r Report, now time.Time, used int64, lease time.Duration) bool {
	co := l.co
	if !co.joined || r.Demand != 0 || r.InFlight != 0 || r.Decreased || r.Increase != 0 || !r.PausedUntil.IsZero() ||
		l.pausedUntil.After(now) || !co.remotePause.IsZero() || now.Sub(time.Unix(0, used)) < parkAfter(lease) {
		return false
	}
	l.q.SetLimit(0)
	if qs := l.q.Stats(); qs.InFlight+qs.Waiting > 0 {
		l.q.SetLimit(co.queueLimitLocked())
		return false
	}
	return true
}

// sameDecrease reports whether shared, the last decrease a sync returned,
// is reported, the decrease that sync reported (zero if none): the shared
// record keeps instants to the millisecond (see Shared.LastDecrease).
func sameDecrease(shared, reported time.Time) bool {
	return !reported.IsZero() && shared.UnixMilli() == reported.UnixMilli()
}

// adopt takes a lane's shared state after a sync: the shared target (plus
// what the local controller grew since the report), the share as the
// queue's limit, another Governor's pause, the shared pacing.
//
// A share larger than the last applies only after grace (see grownShare).
func (l *Lane) adopt(snap syncSnap, s Shared, now time.Time, grace time.Duration) {
	var a adoption
	l.mu.Lock()
	a.othersCut = l.adoptTargetLocked(snap, s, now)
	l.adoptShareLocked(&a, s, snap.at, now, grace)
	l.adoptPauseLocked(&a, snap, s, now)
	if snap.parked {
		// Parked: the share is given up, and a share after the lane
		// wakes grows from none.
		l.co.share, l.co.waking, l.co.unshared = 0, true, true
		l.co.parkedAt = now
		if k := len(l.co.shares); k > 0 {
			l.co.shares[k-1].share = 0
		}
	}
	l.holdLocked(&a, now)
	l.mu.Unlock()
	l.applyAdoption(&a, s, now, grace)
	if snap.parked {
		l.co.parked.Store(true)
		// A call that took the lane since the report found it not
		// parked, and asked for no sync: it wakes now. (Registry.Get
		// marks the lane used before it unparks it: one of the two sees
		// the other.)
		if l.lastUsed.Load() != snap.used && l.co.parked.CompareAndSwap(true, false) {
			l.co.signal()
		}
	}
}

// An adoption is what adopt's steps decided under the lane's lock, for
// applyAdoption to act on after it.
type adoption struct {
	// joined is whether the lane was coordinated before this sync, first
	// whether this is its first join ever.
	joined, first bool
	// from is the queue's limit before the sync, applied the share after.
	from, applied int
	// othersCut is another Governor's decrease that cut the share.
	othersCut bool
	// pauseTo is the end of another Governor's pause now taken (zero:
	// none); resume ends a pause that a success elsewhere ended.
	pauseTo time.Time
	resume  bool
	// hold pauses the queue for want of a share; unhold ends that.
	hold, unhold bool
}

// adoptTargetLocked gives the local controller the shared target, unless
// it decreased during the sync, and reports whether another Governor's
// decrease is taken now. It requires l.mu to be held.
func (l *Lane) adoptTargetLocked(snap syncSnap, s Shared, now time.Time) (othersCut bool) {
	co := l.co
	st := l.ctrl.State()
	if st.Decreases+st.Collapses == snap.decs {
		// (A decrease during the sync is reported by the next one.)
		//
		// Another Governor's decrease takes effect here now, not when it
		// was made: the calls this Governor sent until now were sent at
		// its old share, and their 429s are explained by that decrease.
		// This Governor's own decrease, reported by this sync, is dated
		// already: re-dated now, it would hold the lane's growth longer,
		// or count as a second cut.
		var decAt time.Time
		if s.LastDecrease.After(co.seenDec) && !sameDecrease(s.LastDecrease, snap.decAt) {
			decAt = now
			othersCut = true
		}
		l.ctrl.Adopt(s.Target+max(0, st.Target-snap.target), decAt, s.DecreaseLevel)
		co.base = s.Target
	}
	co.decCount = snap.decs
	return othersCut
}

// adoptShareLocked takes this Governor's share of the shared limit, the
// members and the shared pacing, from the sync reported at reported, and
// marks the lane joined. It requires l.mu to be held.
func (l *Lane) adoptShareLocked(a *adoption, s Shared, reported, now time.Time, grace time.Duration) {
	co := l.co
	a.joined = co.joined
	a.from = co.share
	if !a.joined {
		a.from = l.q.Stats().Limit // joining: the start's 1, or a local limit
	}
	// A part that shrinks or holds is taken at once, whatever the others
	// still have in flight: it takes no slot from them (at a join, the
	// Governors that were there give the newcomer its part as their calls
	// finish, and must not also wait for each other's). A part that grows
	// takes what the others' calls leave (Share), and keeps what it had
	// unless the shared limit fell (then what it had may be over it).
	share := s.Share
	if a.joined && (s.Fair <= co.share || int(s.Target) >= int(co.sharedTarget)) {
		share = max(s.Share, min(s.Fair, co.share))
	}
	// Every other Governor has synced since cut: since OthersSynced, as
	// the record says, or else (an older version among them) since a grace
	// (a sync interval and a half) ago.
	cut := now.Add(-grace)
	if s.OthersSynced.After(cut) && !s.OthersSynced.After(now) {
		cut = s.OthersSynced
	}
	from := a.from
	if co.waking && !s.OthersSynced.Before(reported) {
		// Waking with no other Governor that could still use the slots
		// given up (none, or all parked; OthersSynced is then the
		// Coordinator's instant of this sync, after the report): the
		// share applies at once. (One that synced between the report
		// and that instant counts as synced since, a window of the sync
		// loop's own work.)
		co.shares, from = co.shares[:0], share
	}
	co.waking = false
	a.first = !co.everJoined
	co.joined, co.starting, co.everJoined = true, false, true
	co.share, co.members, co.sharedTarget = co.grownShare(share, now, cut, from), s.Members, s.Target
	co.seenDec = s.LastDecrease
	co.rate, co.burst = s.Rate, s.Burst
}

// adoptPauseLocked takes another Governor's pause, or ends one that a
// success elsewhere ended. It requires l.mu to be held.
func (l *Lane) adoptPauseLocked(a *adoption, snap syncSnap, s Shared, now time.Time) {
	co := l.co
	if !co.pendingPause.After(snap.pause) {
		co.pendingPause = time.Time{} // sent
	}
	// Another Governor's pause holds here as a pause of this Governor's
	// own would: until it ends or a call succeeds. So a pause asked for
	// before this Governor's last success is over already (under a
	// concurrency cap, calls succeed while another Governor's is told to
	// wait; under a request budget, none do).
	if s.PausedUntil.After(co.seenPause) {
		co.seenPause = s.PausedUntil
		if s.PausedUntil.After(now) && s.PausedUntil.After(l.pausedUntil) && !s.PausedAt.Before(co.lastOK) {
			a.pauseTo = s.PausedUntil
			l.pausedUntil = a.pauseTo
			co.remotePause = a.pauseTo
		}
	}
	// A pause taken from another Governor that a success elsewhere ended,
	// or one of this Governor's own, sent, that a success elsewhere ended:
	// the shared record holds no pause as late (a Governor that has no call
	// in flight, joining, would else wait out the whole hint while the
	// others' calls succeed).
	a.resume = !co.remotePause.IsZero() && s.PausedUntil.Before(co.remotePause) && l.pausedUntil.Equal(co.remotePause) ||
		co.pendingPause.IsZero() && l.pausedUntil.After(now) && l.pausedUntil.Equal(co.seenPause) && s.PausedUntil.UnixMilli() < l.pausedUntil.UnixMilli()
	if a.resume || !co.remotePause.After(now) {
		co.remotePause = time.Time{}
	}
	if a.resume {
		l.pausedUntil = time.Time{}
		l.wakeRetriesLocked()
	}
}

// holdLocked makes the share the queue's limit, and decides whether the
// lane is held for want of one. It requires l.mu to be held.
func (l *Lane) holdLocked(a *adoption, now time.Time) {
	co := l.co
	co.unshared = co.unshared && co.share == 0
	l.q.SetLimit(co.queueLimitLocked())
	// No share (the others use the whole limit): no call at all, rather
	// than the one a queue's limit of 1 lets out, until a sync gives one.
	// The hold lasts a grace at most: a sync that does not come (Redis
	// lost) does not hold the lane. (An unshared lane's limit of 0 needs
	// no hold: a sync gives it a share, or one that fails ends it.)
	a.hold, a.unhold = co.share == 0 && !co.unshared, co.held && co.share > 0 && !l.pausedUntil.After(now)
	co.held = a.hold
	a.applied = co.share
	a.othersCut = a.othersCut && a.joined && a.applied < a.from
}

// applyAdoption acts on what adopt decided, without the lane's lock: the
// cause of a cut, the token budget's spenders, the queue's holds and
// pauses, the events and logs.
func (l *Lane) applyAdoption(a *adoption, s Shared, now time.Time, grace time.Duration) {
	if a.othersCut {
		l.m.byCause[CauseOtherGovernor].Inc()
		l.lastCause.Store(uint32(CauseOtherGovernor) + 1)
		l.events.event(evDecreased, now, slog.Int("from", a.from), slog.Int("to", a.applied), slog.String("cause", CauseOtherGovernor.String()))
	}
	l.tokens.setSpenders(s.Members, now)
	if a.hold {
		l.q.PauseUntil(now.Add(grace))
	}
	if a.unhold {
		l.q.Resume()
	}
	if a.resume {
		l.q.Resume()
		l.log.Debug("lane resumed: a call succeeded in another governor", "lane", l.id)
	}
	if !a.pauseTo.IsZero() {
		l.q.PauseUntil(a.pauseTo)
		l.m.pauses.Inc()
		l.events.event(evPausedRemote, now, slog.String("until", a.pauseTo.Format(time.RFC3339Nano)))
	}
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("lane synced", "lane", l.id, "shared_target", s.Target, "share", s.Share, "applied", a.applied, "members", s.Members)
	}
	if !a.joined {
		// A rejoin follows Redis found again, which the Coordinator logs
		// once for every lane.
		level := slog.LevelDebug
		if a.first {
			level = slog.LevelInfo
		}
		l.log.Log(context.Background(), level, "lane coordinated", "lane", l.id, "members", s.Members, "share", s.Share, "shared_target", s.Target)
	}
}

// fallback governs the lane alone again after a failed sync, from its
// share: the local controller continues from what this Governor was using.
func (l *Lane) fallback() {
	l.mu.Lock()
	co := l.co
	held := co.held
	co.held, co.unshared = false, false
	co.parked.Store(false)
	if !co.joined {
		if co.starting {
			// The first sync failed: govern alone from the start.
			co.starting = false
			l.q.SetLimit(l.ctrl.Limit())
		}
		l.mu.Unlock()
		if held {
			l.q.Resume()
		}
		return
	}
	co.joined = false
	co.shares = co.shares[:0]
	fair := co.share
	if co.members > 0 {
		fair = max(fair, int(co.sharedTarget)/co.members)
	}
	l.ctrl.Adopt(float64(max(1, fair)), time.Time{}, 0)
	limit := l.ctrl.Limit()
	l.q.SetLimit(limit)
	l.mu.Unlock()
	if held {
		l.q.Resume()
	}
	// (At debug level: the Coordinator logs the loss once for every lane.)
	l.log.Debug("lane governed locally", "lane", l.id, "limit", limit)
}

// sharedPace returns the lane's shared pacing, if any.
func (l *Lane) sharedPace() (rate, burst float64, joined bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.co.rate, l.co.burst, l.co.joined
}

// sharesBucket reports whether the lane books its request budget on the
// bucket shared over the Coordinator now (see reserveShared).
func (l *Lane) sharesBucket() bool {
	if l.co == nil {
		return false
	}
	rate, _, joined := l.sharedPace()
	return joined && rate > 0 && l.co.coord.Up()
}

// reserveShared books a dispatch on the lane's shared bucket when the lane
// is coordinated and a rate is known; ok is false when the local pacer
// decides (no shared rate, or the Coordinator down or slow).
//
// The shared bucket is the count of every Governor's dispatches, so it
// refills at the rate learned, as the local pacer's count does: the
// largest lower bound the Governors published lately (see pacer.learned),
// which converges on the provider's from below (see pacer.observe).
// (The local pacer's paceMargin spaces the waits of its own calls, and
// what that leaves goes to the calls after; a bucket booked at the margin
// would lose it for good.)
func (l *Lane) reserveShared(ctx context.Context) (time.Duration, bool) {
	rate, burst, joined := l.sharedPace()
	if !joined || !(rate > 0) || !l.co.coord.Up() {
		return 0, false
	}
	if l.pace.maxGap > 0 {
		rate = max(rate, 1/l.pace.maxGap.Seconds())
	}
	d, err := l.co.coord.Reserve(ctx, l.id, rate, burst)
	if err != nil {
		return 0, false
	}
	return min(d, maxDelay), true
}

// syncLoop syncs the lanes every SyncInterval, and at once when a lane
// asks (a decrease, a pause), until the Registry closes; then it gives the
// lanes' shares back. It gives an evicted lane's share back before the
// next sync.
func (r *Registry) syncLoop() {
	defer close(r.syncDone)
	coord := r.cfg.Coordinator
	t := time.NewTicker(r.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			ids := r.takeLeaving()
			for _, l := range r.All() {
				ids = append(ids, l.id)
			}
			_ = coord.Leave(context.Background(), ids)
			return
		case <-t.C:
		case <-r.kick:
		}
		if ids := r.takeLeaving(); len(ids) > 0 {
			// Evicted lanes: their shares go back at once, as at a
			// shutdown. (A failure leaves their leases to expire.)
			_ = coord.Leave(r.ctx, ids)
		}
		r.syncLanes()
	}
}

// syncDue reports whether the lane syncs at this tick: unless it is
// parked, with no call waiting (a retry takes the queue without Get), and
// synced within parkedSync.
func (l *Lane) syncDue(at time.Time) bool {
	co := l.co
	if !co.parked.Load() {
		return true
	}
	l.mu.Lock()
	last := co.parkedAt
	l.mu.Unlock()
	if at.Sub(last) >= co.parkEvery || l.q.Len() > 0 {
		co.parked.Store(false)
		return true
	}
	return false
}

// syncLanes syncs every lane with the Coordinator in one call.
func (r *Registry) syncLanes() {
	all := r.All()
	at := r.cfg.Now()
	lanes := make([]*Lane, 0, len(all))
	for _, l := range all {
		if l.syncDue(at) {
			lanes = append(lanes, l)
		}
	}
	if len(lanes) == 0 {
		return
	}
	reports := make([]Report, len(lanes))
	snaps := make([]syncSnap, len(lanes))
	for i, l := range lanes {
		reports[i], snaps[i] = l.report(r.cfg.AIMD.Max, at, time.Duration(demandMemory*float64(r.cfg.SyncInterval)), r.cfg.LeaseTTL)
	}
	shared, err := r.cfg.Coordinator.Sync(r.ctx, reports)
	if err != nil || len(shared) != len(lanes) {
		for _, l := range all {
			l.fallback()
		}
		return
	}
	now := r.cfg.Now()
	for i, l := range lanes {
		l.adopt(snaps[i], shared[i], now, r.cfg.SyncInterval*3/2)
	}
}
