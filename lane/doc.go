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
// else of the least recently used lane idle for EvictAfter, or gets
// ErrTooManyLanes.
//
// Each Lane has a queue.Queue and an aimd.Controller. For each attempt the
// caller takes a slot from the lane's Queue, calls Reserve (and waits what
// it says, holding the slot, between Hold and Unhold: the provider's
// request budget, learned from ObserveBudget), makes the attempt, then
// reports it with Observe, which feeds the controller and sets the queue's limit from it (a 429 whose
// report says the request budget was empty: ObserveEmptyBudget, which
// leaves a call sent before the lane knew the budget to the pacer, and
// for a later one also shrinks the share of the budget the pacer takes as
// the lane's own, since others spend it too), and releases the slot. A lane that knows one of its provider's token budgets
// (ObserveTokens, HasTokenBudget) also books each call's estimated cost
// with ReserveTokens before it is sent (the wait, Hold to Unhold, is the
// longer of the two), and gives it back with GiveBackTokens when the
// provider refuses the call; a refusal whose report (headers, or the
// numbers of its message) shows the budget without room for it
// (TokensRefused) shrinks the share of that budget the lane takes as its
// own, as for the request budget, and an answer with no report grows a
// budget known only from such messages back (TokensServed; see share.go
// and tokens.go). A booking is a place in line: when the wait is over
// the caller asks Behind, and waits again for what it says (the share
// was cut meanwhile, or a report showed less left), until it says 0.
// Held counts the calls that
// wait so; the controller does not grow the limit on answers that come
// while any does (aimd.Sample.Held): the budget holds the lane back, and
// it reads the level at which the provider refused a call (a 429's) at
// the calls at the provider, in flight less held (aimd.Sample.Unsent).
// Pause holds the lane's dispatches for a provider's Retry-After until a
// call succeeds (Answered) or the time comes, whichever is first (if the
// time comes with calls of the lane in flight, the queue lets one call
// out, and the others once a call in flight ends outside a pause: see
// queue.Queue.PauseUntil); NextSuccess lets a call answered 429 wait the
// same way. Dispatch and Done bracket each attempt
// while it holds the provider's capacity (a stream, until it ends), so that
// Contended can tell a 429 that came while the lane's other calls were
// being served from one given to a lane the provider serves nothing.
// A new lane starts as its controller paces it (aimd.Controller.AdmitAt):
// one call, then one more each time its calls go unrefused for a step of
// the start (an admission window, then half of one); the lane keeps the
// timer for that while the start lasts, and gives a lane of an upstream
// that has refused a call a window of at least twice its quickest
// refusal. The caller tells the Registry of each connection it opens to
// an upstream (Connecting): a step of a start does not end while one is
// opening, nor before the step's time and three times the upstream's
// quickest opening have passed since the last one opened (twice beyond
// the step over connections already open), so that a provider far away
// has the time to refuse. Every method of Lane and Registry is
// safe for concurrent use and takes
// the time it acts at, so tests drive it with explicit instants.
//
// With a Coordinator (package coord, over Redis) each lane is shared with
// the other Governors that use it: a loop owned by the Registry syncs
// every lane each SyncInterval, and at once after a decrease or a pause.
// The controller then holds the lane's shared limit and the queue this
// Governor's share of it; each token budget starts at an equal part among
// the live Governors on the lane, and their number joining or leaving
// scales each budget's share. A failed sync governs the lane alone again
// from its share; coordination never blocks a call. Close stops the loop, gives
// the lanes' shares back and closes the queues.
//
// A lane logs its pauses, decreases and collapses in summary (see
// SummaryInterval): a storm of 429s costs a few lines, not one per call.
// Each cut of its limit is counted, and logged, with its Cause: the caller
// says what a refusal was for (ObserveRefusal: the account's limit, the
// provider overloaded, a token budget; ObserveEmptyBudget: the request
// budget), and a failure what went wrong (ObserveFailure). Its metrics
// also carry the provider budgets it knows, per kind, for as long as it
// knows them. CountTokens adds an answer's usage to the lane's token
// counters.
package lane
