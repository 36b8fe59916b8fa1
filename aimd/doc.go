// Package aimd computes how many calls a lane may have in flight at an LLM
// provider, from the outcomes of the calls it has made.
//
// Providers limit each account and say "too much" only after the fact, with
// a 429 (or Anthropic's 529). A Controller raises its limit while calls
// succeed with the limit in use and lowers it multiplicatively when the
// provider signals congestion (additive increase, multiplicative decrease,
// as in TCP), so that the limit follows a capacity that changes.
//
// A Controller is pure logic, like golang.org/x/time/rate: it starts no
// goroutines, and its state advances only in ObserveAt (and AdmitAt, Adopt),
// from the time passed in; the limit never changes with time alone. The caller dispatches
// calls while in flight < Limit() and feeds every finished attempt back as
// a Sample:
//
//	ctl := aimd.New(aimd.Config{Max: 64}, time.Now())
//	...
//	ev := ctl.Observe(aimd.Sample{Outcome: aimd.RateLimited, Latency: rtt, InFlight: n, Dispatched: granted})
//
// A Default controller starts a lane with one call and raises its limit
// toward Config.Initial by time, not by answers: one call more each time
// the calls the lane has out have gone unrefused for Config.AdmissionWindow
// (the first step) or half of it (AdmitStep), since a provider refuses a
// call it has no room for long before it answers one. The caller calls
// AdmitAt at the instant AdmitDue returns (a timer), with the calls in
// flight, while AdmitDue reports a start under way. A 429 on the way,
// after k calls got in (or were answered), sets the limit to k; one
// before any call got in leaves the lane asking at Initial, as a newcomer
// to an account that others fill.
//
// Success (a 2xx, or a final 4xx) may raise the limit (the Default preset
// raises it only while it holds the lane back: the limit in use, and no
// call held by the caller for a provider's budget meanwhile, Sample.Held);
// RateLimited (429, 529) and Timeout lower it; Failure (a 5xx, a
// connection error) is not a congestion signal and changes nothing. The Event returned says what the
// sample did, for logs and metrics; State is a snapshot. Adopt replaces the
// target with one decided elsewhere, for a lane that several processes
// govern together.
//
// Config.Preset selects the rules. Default, Governor's own, is clocked by
// round trips: one decrease per round trip (answers to calls dispatched
// before the last decrease are ignored), slow start back to just below the
// level at which congestion came and probing above it, a collapse to 1
// only when nothing at all succeeds across decreases, and, after ten quiet
// round trips, 30% of the calls in flight given back for a round trip so
// that other processes sharing the provider can grow (a lane of more than
// Initial/0.3 calls that has had no congestion signal since New, or none
// since a yield nobody took, the lane having got back to its level with
// no congestion signal on the way, gives back one call instead and keeps
// its slot free for four round trips, and after a yield nobody took
// yields every twenty round trips, until the next congestion signal).
// A lane that keeps
// finding the same ceiling probes above it less and less often, and gives
// nothing back meanwhile, until a 429 at another level (or a decrease
// adopted from other processes) says that the ceiling moved or is shared:
// holding at most Initial/2 calls, down to once per 64 calls; holding
// more, only while none of its ceilings has ever moved (a call succeeded
// above one, or a probe found one at another level), down to once per 64
// calls up to 5/8 of Initial; above, since near its share of a cap that
// several processes split a lane finds the slots others free by probing,
// once per ProbeHold round trips until it has found the same ceiling 15
// times in a row, and once per 64 calls from then on. It also
// reads latency, for providers that slow down instead of answering 429: it
// keeps how long calls take at each level of concurrency it has used, and
// when calls sent under a higher limit take longer than those sent under the
// lowest by more than Config.LatencyTolerance and than chance explains, it
// cuts the limit back to the highest level whose calls did not slow down
// (within it, to where latency that rises with the square of the calls in
// flight would be the lowest level's; the event is Decreased,
// State.DecreaseCause Success), and from then on rises, a few calls into
// the next level at most, only once the level below it is known not to
// slow calls down (and once, if it runs at the lowest level it knows and
// calls there take longer than those its start let out with fewer in
// flight, it goes back to the level of those); cut back to the same level
// again and again, it probes above it less and less often, and its yields
// give back the whole number of calls nearest 30% rather than rounding its
// limit down. Latency that varies as much at every level (output lengths,
// a heavy tail) changes nothing. A success slower than chance explains
// against the calls sent with the fewest in flight does not grow the limit
// (while the lane slow-starts with no ceiling to stop at, one far slower
// than that cuts it back to the highest level whose calls did not slow
// down, and so do calls it let out above its lowest level that are far
// fewer back than that level's latencies make likely: their silence says
// they are slow before they answer; it counts the calls let out from
// Sample.InFlight, and reads nothing without it or once it has adopted a
// target), and a timeout while latency has exploded collapses the lane
// even if some calls still succeed. Config.Initial is where a lane's start
// leads and the share it keeps under contention: a lane above it gives a
// slot back each time it overshoots, so uncoordinated processes sharing
// one account settle near Initial each when Initial is about the account's
// concurrency divided by their number. Phoenix reproduces Arize Phoenix's
// ConcurrencyController rule for rule, with its defaults: fixed feedback
// windows, +0.5 per clean window, ×0.5 per window with a 429 or a timeout,
// collapse to 1 on two 429s within 15 seconds.
//
// DESIGN.md, beside this file, states every rule of both presets, the
// reasoning behind them, and the simulation figures that chose the
// constants.
package aimd
