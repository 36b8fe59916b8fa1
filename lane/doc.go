// Package lane governs the calls to one provider account and model: a
// lane is one upstream, one credential and one model, because providers
// limit per account and per model, so a 429 for one model or key never
// slows another.
//
// A Registry holds the lanes, created on first use by Key (the caller
// computes the upstream's name, the credential's hash and the model; this
// package sees no HTTP). MaxLanes bounds them, and their metric series:
// past it a new model of a known credential shares that credential's
// OtherModel lane, and a new credential takes the place of a lane whose
// credential the provider refused on every answer (ObserveCredential), or
// else of the least recently used lane idle for 2 minutes (or twice
// Config.MaxPause or Config.MaxBackoff, if longer), or gets
// ErrTooManyLanes.
//
// Each Lane has a queue.Queue and an aimd.Controller. For each attempt the
// caller:
//
//  1. takes a slot from the lane's Queue;
//  2. calls Reserve for the provider's request budget and, when the lane
//     knows one of its token budgets (HasTokenBudget), ReserveTokens for
//     the call's estimated cost; it waits the longer of the two, holding
//     the slot, between Hold and Unhold, then asks Behind and waits again
//     for what it says, until it says 0;
//  3. brackets the attempt with Dispatch and Done, for as long as it holds
//     the provider's capacity (a stream, until it ends);
//  4. reports what the answer says: its budgets (ObserveBudget,
//     ObserveTokens), and its outcome with Observe, ObserveRefusal (a 429
//     or 529, with what it was for: the account's limit, the provider
//     overloaded, a token budget), ObserveEmptyBudget (a 429 of an empty
//     request budget) or ObserveFailure (with what went wrong); a refused
//     call's tokens come back with GiveBackTokens;
//  5. releases the slot.
//
// The outcome feeds the controller, whose limit becomes the queue's. Pause
// holds the lane's dispatches for a provider's Retry-After until a call
// succeeds (Answered) or the time comes, whichever is first; NextSuccess
// lets a call answered 429 wait the same way. A new lane starts as its
// controller paces it (aimd.Controller.AdmitAt), one call and then one more
// per step; the caller tells the Registry of each connection it opens to an
// upstream (Connecting), and a step does not end while one is opening.
// Every method of Lane and Registry is safe for concurrent use and takes
// the time it acts at, so tests drive it with explicit instants.
//
// With a Coordinator (package coord, over Redis) each lane is shared with
// the other Governors that use it: a loop owned by the Registry syncs
// every lane each SyncInterval, and at once after a decrease or a pause.
// The controller then holds the lane's shared limit and the queue this
// Governor's share of it. A failed sync governs the lane alone again from
// its share; coordination never blocks a call. Close stops the loop, gives
// the lanes' shares back and closes the queues.
//
// A lane logs its pauses, decreases and collapses in summary (see
// SummaryInterval): a storm of 429s costs a few lines, not one per call.
// Each cut of its limit is counted, and logged, with its Cause. Its metrics
// also carry the provider budgets it knows, per kind, for as long as it
// knows them. CountTokens adds an answer's usage to the lane's token
// counters.
//
// DESIGN.md, beside this file, states the rules behind these calls in
// full: how the shares of the provider's budgets are cut and grown, what
// Held and Contended tell the controller, and the steps of a new lane's
// start.
package lane
