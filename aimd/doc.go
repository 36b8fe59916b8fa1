// Package aimd computes how many calls a lane may have in flight at a
// provider, from the outcomes of the calls it has made.
//
// # Why
//
// LLM providers limit each account, and they say "too much" only after
// the fact, with a 429 (or Anthropic's 529). A client that sends at a fixed
// concurrency either leaves capacity unused or gets a stream of 429s, and
// the capacity changes under it (other users of the account, the
// provider's load, a new rate-limit tier). A Controller turns outcomes into
// a limit that follows the capacity: it raises the limit while calls
// succeed and lowers it multiplicatively when the provider signals
// congestion: AIMD, the rule TCP uses for the same problem.
//
// A Controller is pure logic, like golang.org/x/time/rate: it starts no
// goroutines, and its state advances only in ObserveAt, from the time
// passed in. The caller (package lane) dispatches calls while
// in-flight < Limit() and feeds every finished attempt back as a Sample:
//
//	ctl := aimd.New(aimd.Config{Max: 64}, time.Now())
//	...
//	ev := ctl.Observe(aimd.Sample{Outcome: aimd.RateLimited, Latency: rtt, InFlight: n})
//
// Outcomes: Success (the provider answered, 2xx or a final 4xx), RateLimited
// (429/529) and Timeout are what the controller acts on; Failure (5xx,
// connection error) is not a congestion signal and changes nothing.
//
// # The Phoenix preset
//
// Phoenix reproduces Arize Phoenix's ConcurrencyController
// (phoenix-evals executors.py) rule for rule, as a reference and for users
// who want its behaviour. Every constant comes from Config.
//
//   - The target starts at Initial (default Max, what Phoenix's
//     AsyncExecutor passes). The limit is min(max(1, int(target)), Max).
//   - Feedback windows of Window (5s). The first starts at New. A window
//     ends at the first Success, RateLimited or Timeout sample at least
//     Window after its start; that sample counts in the ending window, and
//     the next window starts at that sample's instant. A Failure is not
//     recorded at all and does not end a window.
//   - A window with any RateLimited or Timeout sample multiplies the
//     target by DecreaseRatio (0.5); a clean window adds IncreaseStep
//     (0.5). The internal target is not clamped, as in Phoenix: it can
//     wind up above Max during long clean periods and sink below 1.
//   - Collapse: the instants of the last CollapseThreshold (2) RateLimited
//     samples are kept (never pruned, never cleared); when the newest and
//     the oldest of them are at most CollapseWindow (15s) apart, the target
//     becomes 1 at once. Timeouts do not count toward a collapse. A sample
//     that collapses and also ends a window then halves the target to 0.5.
//   - Phoenix has no notion of recovery; the controller reports Recovered
//     at the first clean window after a collapse.
//   - The latency EWMA takes successes only: the first sets it, then
//     ewma = (1-LatencyAlpha)*ewma + LatencyAlpha*latency (alpha 0.2).
//
// Its weaknesses are the reason for the Default preset: one 429 in a window
// halves the target however many calls succeeded; a burst of 429s caused
// by one overshoot is two errors within 15s, so it collapses to 1; the
// target grows in quiet periods (and winds up above Max) although nothing
// tested it; and after a collapse it climbs back by 0.5 per 5s. Against a
// provider with a hard concurrency cap of 16, the simulation in
// sim_test.go gets about 0.42 of the optimum goodput.
//
// # The Default preset
//
// Default keeps AIMD and collapse detection but clocks itself by round
// trips, not wall-clock windows, learns the level at which congestion
// appears, and gives back part of its share now and then so that lanes of
// other processes sharing the provider can grow. A call was dispatched at
// Sample.Dispatched, when its slot was granted (now-Latency if the caller
// does not say); "fresh" means dispatched after the last decrease or
// yield.
//
//   - One decrease per round trip: a congestion signal from a call
//     dispatched at or before the last decrease is ignored, since that
//     decrease already answered it. A burst of 429s from one overshoot is
//     one decrease.
//   - A fresh congestion signal, when a fresh call has succeeded since the
//     last decrease, multiplies the target by DecreaseRatio (0.9) and
//     remembers the level L at which it came (the limit, or the in-flight
//     count if lower). For a 429 the cut frees at most 2 slots below L:
//     the target becomes max(target*0.9, L-2).
//   - Give back above Initial: when the lane held more than Initial calls
//     beside the one that got that 429 (L-1 > Initial), the target goes at
//     least one slot below L-1 (L-1.5), and two (L-2.5) when L is lower
//     than the level of the previous decrease: the slot it gave back last
//     time was taken. Below 10 calls the cut of 10% alone rounds back to
//     L-1 (0.9 x 10 = 9) and gives nothing back. At or below Initial the
//     lane keeps what it holds.
//   - If no fresh call has succeeded since the last decrease (but older
//     calls have), that cut was not enough, or others sharing the
//     provider took what it freed: multiply by DecreaseRatio² (0.81) and
//     probe from there at once. At or below Initial, such a 429 changes
//     nothing: the lane is being squeezed out of a shared cap, and a lane
//     cut to 2 or 3 calls asks too rarely to win back a slot as one frees
//     up. A fresh success still confirms the last cut, after which a 429
//     cuts again, so a lane alone above a small cap does come down to it;
//     storms take it lower too. If no call at all has succeeded since
//     the last decrease, it is a storm (below): with CollapseThreshold
//     above 2, the decreases before the collapse multiply by
//     RepeatDecreaseRatio (0.5).
//   - Growth only from fresh successes, and only while the limit is in use
//     (Sample.InFlight >= Limit(); 0 means unknown and counts as in use),
//     so the target never grows past what the lane uses and never above
//     Max.
//   - Slow start below L-1: +1 per success, which doubles the target
//     every round trip. With no level remembered (before any decrease,
//     after capacity grew) slow start goes up to Max at +2 per success,
//     tripling every round trip: against a hard cap the overshoot is the
//     same (calls over the cap are answered 429 at once) and the lane gets
//     there a round trip sooner. This is how the lane starts (from
//     Initial, min(Max, 8)), and how it comes back after a quiet period, a
//     decrease or a yield.
//   - At L-1 it holds for 1+limit/3 round trips, at most ProbeHold (4),
//     then probes: the increase per round trip starts at IncreaseStep (1)
//     and doubles every clean round trip (flat near L, then convex, like
//     CUBIC). After a cut that followed an unconfirmed one it probes at
//     once, since L is not a level that works. When the last two
//     decreases came at the same level (a ceiling that stays put), the
//     first probe asks for the one more call at once rather than over a
//     round trip: its answer, a 429 or the news that capacity grew, comes
//     a round trip sooner.
//   - Recall: while the limit is below 70% of the most calls the lane
//     recently had answered at once (a peak that fades by e every 64
//     round trips), the hold is one round trip. Capacity that was there a
//     moment ago often comes back (a provider's throttle lifts; S3's cap
//     goes 32 -> 8 -> 32), and a lane at 8 probing every 3 round trips
//     found it up to 2 s late: S3 reached 0.95 of the optimum in half of
//     govbench's runs, 0.935 in the others (with the recall, 18 runs of 21
//     on one machine reached it, the others 0.941 to 0.948). The price
//     is a 429 per round trip or two at the lowered level, for about a
//     minute of round trips (cap32-8-32 in the simulation: 2.7 429s per
//     100 calls against 2.0).
//   - Capacity grew when a call dispatched once the limit was back at L
//     succeeds with L calls in flight (or when a whole round trip at L is
//     clean, if the caller does not count calls in flight): L is
//     forgotten and slow start resumes at once.
//   - A round trip ends when a call dispatched after the round began
//     succeeds, so no latency estimate is needed.
//   - Collapse only on a storm: CollapseThreshold (2) decreases in a row,
//     within CollapseWindow (15s) but at least a latency EWMA apart from
//     the first, with no successful answer at all in between, in a lane
//     that is no longer a newcomer (below). (Two 429s a millisecond apart
//     say nothing yet of the lane's calls still running.) The target
//     becomes 1, and slow start takes it back to half the pre-storm level
//     (Recovered when it gets there); probing follows.
//   - A newcomer is not in a storm: until Initial calls of the lane have
//     succeeded, the first 429 cuts by DecreaseRatio and later ones change
//     nothing (timeouts follow the storm rule). Others hold the capacity; a lane
//     that keeps asking at its level wins slots as they free up, where a
//     lane collapsed to 1 asks too rarely to ever get any. Its first calls
//     get in one at a time, with 429s in between: cut on those, as when
//     the rule ended at the first success, a newcomer went from 7 to 4
//     within seconds in the shared simulation and stayed there (S4 met its
//     goals in 908 seeds of 1000 then, 925 now). Alone under a cap below
//     Initial, a lane comes down a round trip or two later than it would
//     otherwise. The price is more 429s while a shared cap is contended
//     (about 4 per 100 calls in the shared simulation, against 3 without
//     these two rules).
//   - Yield: after 10 round trips without a congestion signal, and at
//     least a second after the last one or the last yield (a provider that
//     answers in a millisecond would else make the lane yield every few
//     milliseconds, and calls wait in the queue for nothing), the lane
//     gives back 30% of its calls in flight (at least one; none below 2),
//     does not refill those slots for a round trip (until a call
//     dispatched after the yield succeeds), then slow-starts back to the
//     level it yielded from. The event is Yielded; State counts Yields.
//     The count of quiet round trips also starts again when capacity
//     grew: a lane growing into free slots keeps them from nobody.
//
// Why yield. Against a hard concurrency cap shared by several processes
// (govbench's S4), a slot that frees up goes to whoever asks first, and a
// process whose call just finished asks within a fraction of a millisecond
// for its next one: slots stick to their holder. A 429 goes to the process
// that asks for one more slot while the cap is full, not to the one that
// holds most. An incumbent whose clients never ask for more than it holds
// never sees a 429 and never gives anything back, so AIMD, which converges
// to fairness only when every competitor sees congestion in proportion to
// its share, leaves the late processes starving (Jain's index 0.5 to 0.88
// in S4 before the yield). The yield, like BBR's ProbeRTT, makes every
// lane that has held its level quietly for a while give back a share in
// proportion to its size; a competitor that asks meanwhile gets it, and
// the yielder's own 429 on the way back makes it settle lower. Alone, a
// yield costs what the lane's clients would have sent in the slots it
// gave back for that round trip: a lane whose clients never fill its
// limit (16 clients, a provider that takes 64) gets 0.935 of what its
// clients allow, against 0.971 without the yield, about 4% of its
// throughput (TestSimulationClientLimited). A smaller yield costs less
// and shares worse: 15% gives 0.951 alone, but both S4 goals in 892
// simulated seeds of 1000 against 925. A lane that probes a hard cap sees
// a 429 every few round trips anyway and never yields. The probe hold that grows with the limit works the
// same way: small lanes probe more often than large ones and so win more
// of the slots that decreases and yields free.
//
// Why give back above Initial. The yield does not help once every lane
// sees 429s: each probes a full cap every few round trips, so none is
// ever quiet for 10. Then what a failed probe costs decides the split, and
// with cuts of 10% it cost nothing below 10 calls (the cut rounds back to
// what the lane held): any split of the cap among lanes holding 9 or fewer
// was a fixed point. In S4 three early processes settled at 9 each and the
// last to join kept the remaining 5 for the rest of the run (Jain 0.94 and
// below, in 42 of 100 simulated runs). Initial is where every lane starts,
// so a lane that joins late asks for Initial, gets squeezed below it, and
// catches the slots that lanes above it give back as they probe; lanes at
// or below Initial keep theirs. The split converges to Initial each when
// the cap is about Initial times the number of processes sharing it, which
// is why GOVERNOR_AIMD_INITIAL is the knob for replicas that share an
// account without coordination: set it to about the account's concurrency
// divided by the number of Governors. (Simulated, 8 lanes on a cap of 32
// joining 2 s apart: Jain 0.59 with Initial 8, where a third of the lanes
// get less than a call a second, and 0.996 with Initial 4:
// TestSimulationManyReplicas.) Alone under a cap the
// rule changes nothing above 10 calls, where the cut already gives a slot
// back, and costs a slot for a round trip per probe at 9 or 10.
//
// Why 0.9 rather than CUBIC's 0.7: against a hard cap most decreases are
// one probe too many, and what a decrease costs is the capacity left unused
// for the round trip until a fresh call confirms the new level. In the
// simulation (mean of 40 seeds), a first cut of 0.5 gives 0.84 of optimum
// goodput, 0.7 gives 0.90, 0.8 gives 0.93 and 0.9 gives 0.96, for about the
// same number of 429s (Netflix's concurrency-limits AIMDLimit also backs
// off by 0.9). A real drop in capacity is still met multiplicatively: a
// cut that does not help is followed by cuts of 0.81 until one does (32 to
// 8 in about eight 429s, within a round trip). Those were halvings, as in
// TCP, until S4 showed what they do to a lane with a small share of a
// shared cap: its 429 comes back before its next success every time, so
// it was halved again and again while the large lanes lost 10%. The cut
// frees at most 2 slots because a 429 from a hard cap is one call too many: at 33 a cut
// of 10% would leave 3 slots of a cap of 32 idle for that round trip.
// Between 11 and 20 calls the cut gives back one slot of those held, and
// that idle round trip is what lets competitors for a shared cap win
// slots: cutting to L-1 there helps a lone lane by about 1% and halves
// what a shared cap's latecomers get (simulated Jain 0.78 against 0.94).
//
// In the simulation (64 closed-loop clients, 2000 calls, lognormal latency
// with sigma 0.2, 429s retried at once ahead of fresh work; mean of 40
// seeds) the Default preset reaches about 0.959 of optimum goodput with
// 1.5 429s per 100 calls against a cap of 16 (0.955 with mockllm's
// Retry-After of one second honoured), and about 0.957 with 1.6 429s per
// 100 calls on govbench's S3 (cap 32 -> 8 -> 32, 20s each, 3000 calls;
// 0.95 or more in 90 seeds of 100, 63 without the recall). (A controller told
// the cap in advance gets 0.97: latency with sigma 0.2 averages 2% above
// its median, which the optimum uses.) In the shared-cap simulation
// (sim_shared_test.go: govbench's S4 with Retry-After pauses; 1000
// seeds) the four lanes get 0.951 of the cap together (0.933 at worst),
// with Jain's index 0.982 on average while all four run, at least 0.95 in
// 925 seeds of 1000 and 0.81 at worst; both S4 goals (0.93 and 0.95) are
// met in 925 seeds. What decides is how soon the last lane to join gets
// its first call in: it asks once per Retry-After while the others hold
// the cap, and gets in only if a slot is free at that instant. Within 3 s
// (825 seeds) the goals are met in 98% of seeds; later (175), in 68%.
// (Jain 0.58 on average before the yield and the rules for
// newcomers and squeezed lanes; 0.952, and 0.95 in 58 seeds of 100, before the
// give back above Initial. A yield of 40% every 8 round trips, without
// the restart when capacity grew, gave 0.938 of the cap and met both
// goals in 85 seeds of 100: its yields, in the phases where two lanes share the
// cap and none waits, gave slots to nobody.)
//
// Neither preset changes the limit with time alone: LimitAt equals Limit.
// A quiet lane keeps its limit, since a provider's budget refills while
// the lane is idle. (The Default preset's yield is clocked by answers,
// not by time: an idle lane does not yield.)
package aimd
