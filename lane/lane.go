package lane

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
	"github.com/llmgovernor/governor/usage"
)

// A Lane is the unit Governor governs: one upstream, one credential, one
// model, because providers limit per account and per model. Each lane has
// its own queue and controller, so a 429 for one model or key never slows
// another. The lane feeds each attempt's outcome to its controller and sets
// its queue's limit from the controller's. It is safe for concurrent use.
type Lane struct {
	id       string // upstream/model/credential-hash; safe to show and to use as a label
	key      Key
	credHash string // short hash of the credential, never the credential
	log      *slog.Logger
	events   eventLog // the events that repeat, logged in summary

	q *queue.Queue

	mu   sync.Mutex // orders ObserveAt with the SetLimit that follows it
	ctrl *aimd.Controller

	pausedUntil time.Time // guarded by mu; also kept by q
	// admit paces the lane's start (admit.go); ramping says the
	// controller is in it, read without mu.
	admit   admitTimer
	ramping atomic.Bool
	now     func() time.Time // the registry's clock
	// nextOK is closed when a call of the lane next succeeds (see
	// NextSuccess); nil until a call asks for it. Guarded by mu.
	nextOK chan struct{}
	co     *laneCoord // guarded by mu; nil without a Coordinator
	pace   pacer
	att    attempts // in flight, and successes: see Contended
	tokens tokenPacer
	m      *laneMetrics
	load   *connLoad // of the lane's upstream

	// lastUsed is when a call last took the lane or finished an attempt
	// in it (Unix nanoseconds), and rejected and accepted whether the
	// provider has refused the lane's credential (401, 403) and taken it
	// (any other answer), for eviction (see Registry.evictLocked).
	lastUsed atomic.Int64
	rejected atomic.Bool
	accepted atomic.Bool
	// held counts the calls waiting for a provider's budget in their
	// slots (Hold to Unhold), and connWaits the attempts waiting for a
	// free connection to the upstream (WaitConn to GotConn).
	held, connWaits slotWaits
	// lastCause is the Cause of the last decrease or collapse, plus 1;
	// 0 before any.
	lastCause atomic.Uint32
}

// ID returns the lane's id, upstream/model/credential-hash: free of
// credentials, safe to show and to use as a metric label.
func (l *Lane) ID() string { return l.id }

// Queue returns the lane's queue. A call takes a slot there before each
// attempt (Reserve, then the attempt, then Observe) and releases it when
// the attempt is done with; the lane sets the queue's limit and pauses.
func (l *Lane) Queue() *queue.Queue { return l.q }

// close releases what a lane holds outside itself: its metric series. A
// call still holding the lane (none should: it is idle) keeps working.
func (l *Lane) close(set *metrics.Set) {
	l.stopAdmit()
	for _, name := range l.m.names {
		set.UnregisterMetric(name)
	}
}

// ObserveWait accounts for one attempt's wait before it is sent: queued in
// the lane's queue (0 for a slot granted at once), then held in its slot
// for the provider's request or token budget (0 when none was needed; see
// Hold). Their sum is what the attempt adds to X-Governor-Queue-Ms.
func (l *Lane) ObserveWait(queued, held time.Duration) {
	l.m.queueWait.Update((queued + held).Seconds())
	if held > 0 {
		l.m.budgetWait.Update(held.Seconds())
	}
}

// CountTokens adds the tokens an answer of the lane used, as its usage
// reports them (see package usage), to the lane's token counters.
func (l *Lane) CountTokens(t usage.Tokens) {
	l.m.promptTokens.Add(int(t.Prompt))
	l.m.completionTokens.Add(int(t.Completion))
}

// ObserveCredential takes what an answer of the provider says of the
// lane's credential: refused (401 or 403) or not. A lane whose every
// answer refused its credential is the first to make room for a new lane.
func (l *Lane) ObserveCredential(refused bool) {
	if refused {
		if !l.rejected.Load() {
			l.rejected.Store(true)
		}
	} else if !l.accepted.Load() {
		l.accepted.Store(true)
	}
}

// refused reports whether the provider has refused the lane's credential
// on every answer so far, and answered at least once.
func (l *Lane) refused() bool { return l.rejected.Load() && !l.accepted.Load() }

// CountTurnedAway counts a call of the lane that Governor turned away for
// why, before it reached the provider.
func (l *Lane) CountTurnedAway(why Turnaway) { l.m.refused[why].Inc() }

// CountRetry counts a retry after an attempt that came to o.
func (l *Lane) CountRetry(o Outcome) {
	if c := l.m.retries[o]; c != nil {
		c.Inc()
	}
}

// Observe accounts for one attempt that came to o at now: it took latency
// at the provider (from its request's hand-over to a connection: a wait
// for a free connection to the upstream is not the provider's), and its
// slot was granted at dispatched (the limit it was let out under is the
// one the controller had then). Every outcome but ClientGone feeds
// the controller, and the queue's limit follows the controller's. Call it
// with the attempt's slot still held.
//
// A coordinated lane's controller holds the limit shared by every Governor
// on the lane, and its queue this Governor's share of it (see adopt).
func (l *Lane) Observe(o Outcome, latency time.Duration, dispatched, now time.Time) {
	l.ObserveFailure(o, "", latency, dispatched, now)
}

// ObserveFailure accounts, as Observe does, for an attempt that came to o,
// a failure (a server error, a timeout, no answer, an exhausted quota),
// and why says what went wrong ("connection error: dial tcp …: connection
// refused", "503 Service Unavailable"): the lane's "upstream attempt
// failed" log line shows it, so that an operator reads why a provider
// fails without turning on the access log. why must carry no credential.
func (l *Lane) ObserveFailure(o Outcome, why string, latency time.Duration, dispatched, now time.Time) {
	if l.countAttempt(o, why, latency, now) {
		l.control(o, CauseRateLimited, latency, dispatched, now)
	}
}

// ObserveCallerTimeout accounts, as ObserveFailure(Timeout, ...) does, for
// an attempt that timed out under a timeout its caller chose, shorter than
// Governor's own (a batch's "timeout"). Such a timeout that ran out sooner
// than the lane's calls are usually answered (their latency EWMA) says
// the caller gave up, not that the provider slowed down: it is counted as
// a timeout, and the controller hears it as no congestion signal, so one
// caller's impatience does not cut the limit of every caller of the lane.
// A longer one (a provider that hangs) is a congestion signal as any
// timeout is.
func (l *Lane) ObserveCallerTimeout(why string, latency time.Duration, dispatched, now time.Time) {
	if !l.countAttempt(Timeout, why, latency, now) {
		return
	}
	out := aimd.Timeout
	if latency < l.ctrl.State().LatencyEWMA {
		out = aimd.Failure
	}
	l.controlAs(Timeout, out, CauseRateLimited, latency, dispatched, now)
}

// ObserveRefusal accounts, as Observe(RateLimited, ...) does, for an
// attempt the provider refused (429 or 529) for why. To the controller a
// provider overloaded and an account's limit or budget reached are alike;
// to an operator they are not: an overloaded refusal is counted in
// governor_lane_overloaded_total too, and a decrease it brings is counted
// and logged with its cause (see Cause).
func (l *Lane) ObserveRefusal(why Refusal, latency time.Duration, dispatched, now time.Time) {
	if why == RefusedOverloaded {
		l.m.overloaded.Inc()
	}
	if l.countAttempt(RateLimited, "", latency, now) {
		l.control(RateLimited, refusalCause(why), latency, dispatched, now)
	}
}

// ObserveEmptyBudget accounts, as Observe does, for attempt seq (see
// Reserve) answered 429 whose own request budget report (see
// ObserveBudget) says the budget held no call for it.
//
// If the pacer did not yet know the budget when it let the call out (the
// lane's first calls, sent before any answer told the bucket's size), the
// refusal says nothing of how many calls the provider serves at once, and
// the Default controller does not hear of it: its report has set the
// pacer's count, which makes the next calls wait for the refill. Taken as
// a congestion signal, a bucket smaller than Initial, emptied by those
// first calls, would hold the lane below the concurrency the refill rate
// allows for several round trips of probing. A refusal of a call the
// pacer let out knowing the budget means its count was wrong (others
// spend the same budget, or the rate moved): the pacer takes a smaller
// share of the budget as its own, and the controller hears it as any
// 429, as Phoenix's controller, which has no pacer to lean on, always
// does.
func (l *Lane) ObserveEmptyBudget(seq uint64, latency time.Duration, dispatched, now time.Time) {
	l.pace.refused(seq, now.Add(-latency), now)
	if l.pace.blind(seq) && l.ctrl.Config().Preset != aimd.Phoenix {
		l.countAttempt(RateLimited, "", latency, now)
		return
	}
	if l.countAttempt(RateLimited, "", latency, now) {
		l.control(RateLimited, CauseRequestBudget, latency, dispatched, now)
	}
}

// countAttempt counts an attempt that came to o (why, if a failure) and
// reports whether the controller is to hear of it.
func (l *Lane) countAttempt(o Outcome, why string, latency time.Duration, now time.Time) bool {
	l.lastUsed.Store(now.UnixNano())
	l.m.attempts[o].Inc()
	if k, ok := failedEvent(o); ok {
		if why != "" {
			l.events.event(k, now, slog.String("outcome", o.String()), slog.String("error", why))
		} else {
			l.events.event(k, now, slog.String("outcome", o.String()))
		}
	}
	if o == ClientGone {
		// The provider did nothing wrong: the controller does not hear
		// of it.
		return false
	}
	l.m.upstream.Update(latency.Seconds())
	if o == RateLimited {
		l.load.noteRefusal(latency)
	}
	return true
}

// control feeds one attempt's outcome to the controller, and the queue's
// limit follows the controller's. refusal is the cause a decrease that a
// refusal (o RateLimited) brings is counted and logged under.
func (l *Lane) control(o Outcome, refusal Cause, latency time.Duration, dispatched, now time.Time) {
	l.controlAs(o, aimdOutcome(o), refusal, latency, dispatched, now)
}

// controlAs is control with the controller told out for o.
func (l *Lane) controlAs(o Outcome, out aimd.Outcome, refusal Cause, latency time.Duration, dispatched, now time.Time) {
	inFlight := l.q.Stats().InFlight
	// The calls held in their slots for a budget, or waiting for a
	// connection to the upstream, now are not at the provider; the call
	// answered is not one of them.
	unsent := max(0, min(l.held.count()+l.connWaits.count(), inFlight-1))
	l.mu.Lock()
	before := l.ctrl.Limit()
	co := l.co
	shared := co != nil && co.joined
	if shared {
		atProvider := ctrlInFlight(inFlight-unsent, co.share, int(co.sharedTarget), before)
		inFlight = ctrlInFlight(inFlight, co.share, int(co.sharedTarget), before)
		unsent = inFlight - atProvider
	}
	sent := dispatched
	if sent.IsZero() {
		sent = now.Add(-latency)
	}
	ev := l.ctrl.ObserveAt(aimd.Sample{Outcome: out, Latency: latency, InFlight: inFlight, Unsent: unsent,
		Dispatched: dispatched, Held: l.held.since(sent) || l.connWaits.since(sent)}, now)
	limit := l.ctrl.Limit()
	qlimit := limit
	decreased := co != nil && (ev == aimd.Decreased || ev == aimd.Collapsed)
	if decreased {
		co.decDispatched, co.collapsed = dispatched, ev == aimd.Collapsed
	}
	if shared {
		if decreased {
			// Take the cut on the share at once; the sync it asks for
			// tells the others.
			co.share = max(1, (co.share*limit+before-1)/before)
		}
		qlimit = co.queueLimitLocked()
	}
	l.q.SetLimit(qlimit)
	if l.ramping.Load() {
		l.armAdmitLocked(inFlight, now)
	}
	l.mu.Unlock()
	if decreased || shared && ev == aimd.Increased {
		// A decrease is told at once; so is an increase, which gives
		// this Governor's share its part at once (see ctrlInFlight).
		co.signal()
	}

	switch ev {
	case aimd.Decreased:
		cause := l.eventCause(o, refusal)
		l.m.decreases.Inc()
		l.m.byCause[cause].Inc()
		if limit <= before {
			l.events.event(evDecreased, now, slog.Int("from", before), slog.Int("to", limit), slog.String("cause", cause.String()))
		} else {
			// A refusal ended a new lane's start, below the level it
			// was heading for, and above the limit it had so far.
			l.events.event(evStartEnded, now, slog.Int("limit", limit), slog.String("cause", cause.String()))
		}
	case aimd.Collapsed:
		cause := l.eventCause(o, refusal)
		l.m.collapses.Inc()
		l.m.byCause[cause].Inc()
		l.events.event(evCollapsed, now, slog.Int("from", before), slog.Int("to", limit), slog.String("cause", cause.String()))
	case aimd.Recovered:
		l.log.Info("lane recovered", "lane", l.id, "limit", limit)
	case aimd.Yielded:
		l.m.byCause[CauseYield].Inc()
		l.log.Debug("lane yielded", "lane", l.id, "from", before, "to", limit, "cause", CauseYield.String())
	default:
		l.events.flush(now)
	}
}

// eventCause returns the cause of the decrease or collapse the controller
// has just made on an attempt that came to o (refused for refusal, if o
// is RateLimited), and remembers it for Info.
func (l *Lane) eventCause(o Outcome, refusal Cause) Cause {
	c := causeOf(l.ctrl.State().DecreaseCause, o, refusal)
	l.lastCause.Store(uint32(c) + 1)
	return c
}

// Pause holds the lane's dispatches until t (the provider said
// Retry-After), or until a call of the lane succeeds (see Answered),
// whichever is first. now is when the provider said so.
func (l *Lane) Pause(t, now time.Time) {
	l.mu.Lock()
	extended := t.After(l.pausedUntil)
	if extended {
		l.pausedUntil = t
	}
	co := l.co
	if co != nil && t.After(co.seenPause) {
		// Tell the other Governors at once.
		co.pendingPause, co.pendingAt, co.seenPause = t, now, t
	} else {
		co = nil
	}
	l.mu.Unlock()
	if co != nil {
		co.signal()
	}
	if extended {
		l.q.PauseUntil(t)
		l.m.pauses.Inc()
		l.events.event(evPaused, now, slog.String("until", t.Format(time.RFC3339Nano)))
	}
}

// Answered counts a call of the lane that has just succeeded (see
// Contended), lifts a pause, and wakes the calls waiting for that
// (NextSuccess).
//
// A Retry-After says when the provider expects to take that call again;
// whether it speaks for the whole lane depends on the limit behind it. Under
// a request budget the lane should wait, and the pacer, which reads the
// budget, already makes it wait. Under a concurrency cap a call that
// completes frees a slot at once, and holding the lane for the rest of the
// hint (a whole second, typically) would leave that slot idle: the
// controller's decrease is the right answer to a cap. So a pause holds only
// while nothing succeeds, and so does the wait of a call told to come back
// later.
func (l *Lane) Answered(now time.Time) {
	l.att.served.Add(1)
	l.mu.Lock()
	lifted := l.pausedUntil.After(now)
	if lifted {
		l.pausedUntil = time.Time{}
	}
	if l.co != nil {
		l.co.lastOK = now
	}
	l.wakeRetriesLocked()
	l.mu.Unlock()
	if lifted {
		l.q.Resume()
		l.log.Debug("lane resumed: a call succeeded", "lane", l.id)
	}
}

// NextSuccess returns a channel that is closed when a call of the lane next
// succeeds (Answered), here or, for a coordinated lane, in another Governor
// (as its pause ends then). A call answered 429 waits for its Retry-After
// or for that, whichever comes first, as the lane's pause does.
func (l *Lane) NextSuccess() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nextOK == nil {
		l.nextOK = make(chan struct{})
	}
	return l.nextOK
}

// wakeRetriesLocked ends the waits NextSuccess gave out. It requires l.mu
// to be held.
func (l *Lane) wakeRetriesLocked() {
	if l.nextOK != nil {
		close(l.nextOK)
		l.nextOK = nil
	}
}

// Reserve books one dispatch at now on the lane's request budget, holding
// the call's slot, and returns the dispatch's sequence number (for
// ObserveBudget) and how long the call must wait before it is sent. With
// no budget known the wait is 0. A coordinated lane books the bucket every
// Governor on the lane draws from, unless the Coordinator fails or is
// slow; ctx bounds that. The caller waits between Hold and Unhold.
func (l *Lane) Reserve(ctx context.Context, now time.Time) (seq uint64, wait time.Duration) {
	l.armAdmit(now)
	seq, wait = l.pace.reserve(now)
	if l.co != nil {
		if d, ok := l.reserveShared(ctx); ok {
			wait = d
		}
	}
	return seq, wait
}

// Behind returns how much longer a call must wait at now, having waited
// what Reserve (dispatch seq) and ReserveTokens (mark) said at booked. A
// booking is a place in the line of the budget, not an instant: the wait
// said holds while the lane's count of the budget refills as expected,
// and grows when the lane's share of it was cut since (see
// ObserveEmptyBudget, TokensRefused) or a report showed less left than
// counted, so that calls booked at an old share go out at the new one.
// It never makes a call go earlier than it was told, nor wait for a
// token budget longer than MaxPause since booked. A coordinated lane's
// request budget is the shared bucket's, which Reserve booked: only its
// token budgets are asked again. The caller waits again, and asks again,
// until it returns 0.
func (l *Lane) Behind(seq uint64, mark TokenMark, booked, now time.Time) time.Duration {
	var wait time.Duration
	if !l.sharesBucket() {
		wait = l.pace.behind(seq, now)
	}
	return max(wait, l.tokens.behind(mark, booked, now, l.pace.maxGap))
}

// Hold counts, from now, a call that waits in its slot before it is sent,
// for the wait Reserve or ReserveTokens said (the provider's budget), until
// Unhold. While calls wait so, the lane's calls in flight are more than the
// provider holds, and the limit is not what holds the lane back: the
// controller does not grow it on the answers of calls out meanwhile (see
// aimd.Sample.Held), and reads the level at which the provider refused a
// call at the calls at the provider, in flight less held
// (aimd.Sample.Unsent). Held counts them.
func (l *Lane) Hold(now time.Time) { l.held.begin(now) }

// Unhold ends at now a wait begun with Hold: the call is sent, or has
// given up its slot.
func (l *Lane) Unhold(now time.Time) { l.held.end(now) }

// Held returns the number of the lane's calls in flight that wait in
// their slots for a provider's budget now (see Hold).
func (l *Lane) Held() int { return l.held.count() }

// slotWaits counts calls that wait in their slots before they reach the
// provider, and keeps when one last began or ended such a wait. Safe for
// concurrent use.
type slotWaits struct {
	n  atomic.Int64
	at atomic.Int64 // Unix nanoseconds; 0 never
}

// begin counts a call that waits from now, until end.
func (w *slotWaits) begin(now time.Time) {
	w.n.Add(1)
	w.at.Store(now.UnixNano())
}

// end ends at now a wait begun with begin.
func (w *slotWaits) end(now time.Time) {
	w.at.Store(now.UnixNano())
	w.n.Add(-1)
}

// count returns the calls waiting now.
func (w *slotWaits) count() int { return int(w.n.Load()) }

// since reports whether a call has waited at any time since t: one waits
// now, or one began or ended its wait at or after t.
func (w *slotWaits) since(t time.Time) bool {
	if w.n.Load() > 0 {
		return true
	}
	at := w.at.Load()
	return at != 0 && at >= t.UnixNano()
}

// ObserveBudget takes the request budget the answer to dispatch seq
// (reserved at dispatched) reported at now; reports older than the one
// held are ignored.
func (l *Lane) ObserveBudget(b Budget, seq uint64, dispatched, now time.Time) {
	l.pace.observe(b, seq, dispatched, now)
}
