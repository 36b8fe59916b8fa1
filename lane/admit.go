package lane

import (
	"sync/atomic"
	"time"

	"github.com/llmgovernor/governor/aimd"
)

// A lane's start: the controller (Default preset) starts it with one call
// and raises its limit by one toward its Initial each time the calls it
// has out have gone unrefused for a step of its start: an admission
// window, then half of one (aimd.Controller.AdmitAt, AdmitStep).
// Nothing but time says a call was not refused, so the lane keeps a timer
// for the end of each window while the start lasts: armed when a call is
// let out (Reserve) or an answer observed, it feeds the controller the
// calls in flight and sets the queue's limit from it.

// A step's calls may need new connections, and opening one takes a round
// trip to the provider (TLS one or two more) before the call is even sent:
// a provider a few milliseconds away cannot refuse a call within the
// step that let it out. So a step does not end while a connection to the
// lane's upstream is being opened, nor before the step's own time and
// three times the upstream's quickest opening have passed since the last
// one opened, nor before twice that opening has passed beyond the step's
// end (a round trip over a connection already open). A connection's
// opening is the time to a TCP connection: about one round trip.

// maxOpeningLook bounds how long a step waiting for a connection to open
// goes without looking again.
const maxOpeningLook = 100 * time.Millisecond

// maxAdmissionWindow bounds the admission window learned from an
// upstream's refusals.
const maxAdmissionWindow = time.Second

// admissionWindow returns the admission window of a new lane of the
// upstream whose quickest refusal so far took refusal (0: none yet): the
// configured window, or twice that refusal if longer (at most
// maxAdmissionWindow). A provider far away refuses a call tens of
// milliseconds after it was sent; a window shorter than that steps the
// start up before any refusal could come, which is the blind start again.
func admissionWindow(configured, refusal time.Duration) time.Duration {
	if configured < 0 {
		return configured // no ramp
	}
	if configured == 0 {
		configured = aimd.DefaultAdmissionWindow
	}
	if refusal > 0 && configured < maxAdmissionWindow {
		configured = max(configured, min(2*refusal, maxAdmissionWindow))
	}
	return configured
}

// noteRefusal keeps the quickest refusal of an upstream.
func (cl *connLoad) noteRefusal(latency time.Duration) {
	if latency > 0 {
		keepLeast(&cl.refusal, int64(latency))
	}
}

// keepLeast stores v (above 0) in a unless a holds a smaller one; 0 in a
// means none yet.
func keepLeast(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if old > 0 && old <= v || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// Connecting tells the Registry that a connection to upstream is being
// opened, and returns what to call once it has opened (opened true) or
// failed. The lanes of the upstream that are starting wait for it before
// they step up their limit.
func (r *Registry) Connecting(upstream string) (done func(opened bool)) {
	r.mu.RLock()
	cl := r.loads[upstream]
	r.mu.RUnlock()
	if cl == nil {
		r.mu.Lock()
		cl = r.loadLocked(upstream)
		r.mu.Unlock()
	}
	start := r.cfg.Now()
	cl.opening.Add(1)
	return func(opened bool) {
		if opened {
			now := r.cfg.Now()
			cl.noteOpen(now.Sub(start), now)
		}
		cl.opening.Add(-1)
	}
}

// noteOpen records a connection that opened at now and took took.
func (cl *connLoad) noteOpen(took time.Duration, now time.Time) {
	cl.lastOpen.Store(now.UnixNano())
	keepLeast(&cl.quickestOpen, int64(max(took, 1))) // 1: a clock that did not move
}

// stepReady returns when a start's step that the controller lets end at
// due (Controller.AdmitDue) may end, seen from now: due, or later while
// the upstream's connections say a refusal may still be on its way.
// step is the step's own time (Controller.AdmitStep). While a connection
// is being opened it returns when to look again: a step from now, or as
// long as the step has already waited past due (at most maxOpeningLook),
// so that a connection slow to open costs few looks and its end is seen
// within less than its own time (a step waits three times that once it
// has opened).
func (cl *connLoad) stepReady(due, now time.Time, step time.Duration) time.Time {
	if cl.opening.Load() > 0 {
		return later(due, now.Add(max(step, min(now.Sub(due), maxOpeningLook), time.Millisecond)))
	}
	open := time.Duration(cl.quickestOpen.Load())
	ready := due.Add(2 * open)
	if at := cl.lastOpen.Load(); at > 0 {
		ready = later(ready, time.Unix(0, at).Add(step+3*open))
	}
	return ready
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// admitTimer is a lane's timer for the controller's start ramp. Its
// fields are guarded by the lane's mu, but for ramping.
type admitTimer struct {
	t       *time.Timer
	pending bool // t is set to fire
	stopped bool // the registry closed: never again
}

// armAdmitLocked sets the admission timer for the controller's next
// step of its start, if it has one, none is set, and the lane's inFlight
// calls fill its limit (a window the lane does not fill tests nothing).
// It requires l.mu to be held.
func (l *Lane) armAdmitLocked(inFlight int, now time.Time) {
	a := &l.admit
	if a.pending || a.stopped || inFlight < l.ctrl.Limit() {
		return
	}
	due, ok := l.ctrl.AdmitDue()
	if !ok {
		l.ramping.Store(false)
		return
	}
	d := max(l.load.stepReady(due, now, l.ctrl.AdmitStep()).Sub(now), 0)
	if a.t == nil {
		a.t = time.AfterFunc(d, l.admitted)
	} else {
		a.t.Reset(d)
	}
	a.pending = true
}

// armAdmit is armAdmitLocked for a call let out at now, at the cost of an
// atomic load once the start is over.
func (l *Lane) armAdmit(now time.Time) {
	if !l.ramping.Load() {
		return
	}
	inFlight := l.q.Stats().InFlight
	l.mu.Lock()
	l.armAdmitLocked(inFlight, now)
	l.mu.Unlock()
}

// admitted runs on the admission timer's goroutine: the calls in flight
// have gone unrefused for a window.
func (l *Lane) admitted() {
	now := l.now()
	inFlight := l.q.Stats().InFlight
	l.mu.Lock()
	defer l.mu.Unlock()
	l.admit.pending = false
	if l.admit.stopped {
		return
	}
	if due, ok := l.ctrl.AdmitDue(); ok && now.Before(l.load.stepReady(due, now, l.ctrl.AdmitStep())) {
		// A connection of the upstream is opening, or has just opened: a
		// refusal may still come.
		l.armAdmitLocked(inFlight, now)
		return
	}
	before := l.ctrl.Limit()
	ev := l.ctrl.AdmitAt(inFlight, now)
	if ev == aimd.Increased && (l.co == nil || !l.co.joined) {
		l.q.SetLimit(l.ctrl.Limit())
		l.log.Debug("lane start: calls admitted", "lane", l.id, "from", before, "to", l.ctrl.Limit())
	}
	due, ok := l.ctrl.AdmitDue()
	if !ok {
		l.ramping.Store(false) // the start is over
		return
	}
	if ev != aimd.Increased && due.After(now) {
		// Fired early (a clock that is not the timer's): again.
		l.armAdmitLocked(inFlight, now)
	}
	// Otherwise the calls the new limit lets out set the timer again
	// (Reserve) once they fill it; a limit not in use waits for that.
}

// stopAdmit stops the admission timer for good.
func (l *Lane) stopAdmit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.admit.stopped = true
	if l.admit.t != nil {
		l.admit.t.Stop()
	}
	l.ramping.Store(false)
}
