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
// from the time passed in; the limit never changes with time alone. The
// caller dispatches calls while in flight < Limit() and feeds every
// finished attempt back as a Sample:
//
//	ctl := aimd.New(aimd.Config{Max: 64}, time.Now())
//	...
//	ev := ctl.Observe(aimd.Sample{Outcome: aimd.RateLimited, Latency: rtt, InFlight: n, Dispatched: granted})
//
// Success (a 2xx, or a final 4xx) may raise the limit (the Default preset
// raises it only while it holds the lane back: the limit in use, and no
// call held by the caller for a provider's budget meanwhile, Sample.Held);
// RateLimited (429, 529) and Timeout lower it; Failure (a 5xx, a
// connection error) is not a congestion signal and changes nothing. The
// Event returned says what the sample did, for logs and metrics; State is
// a snapshot. Adopt replaces the target with one decided elsewhere, for a
// lane that several processes govern together.
//
// A Default controller starts a lane with one call and raises its limit
// toward Config.Initial by time, not by answers. The caller calls AdmitAt
// at the instant AdmitDue returns (a timer), with the calls in flight,
// while AdmitDue reports a start under way.
//
// Config.Preset selects the rules. Default, Governor's own, is clocked by
// round trips, learns the level at which congestion comes and probes above
// it less often the more often it finds it there, reads latency for
// providers that slow down instead of answering 429, and now and then
// gives part of its share back so that other processes sharing the
// provider can grow. Config.Initial is where a lane's start leads and the
// share it keeps under contention: uncoordinated processes sharing one
// account settle near Initial each when Initial is about the account's
// concurrency divided by their number. Phoenix reproduces Arize Phoenix's
// ConcurrencyController rule for rule, with its defaults.
//
// DESIGN.md, beside this file, states every rule of both presets, the
// reasoning behind them, and the simulation figures that chose the
// constants; its first section sums the rules up.
package aimd
