// Package queue is a lane's waiting room: the calls that Governor has
// accepted for one upstream, credential and model but may not send yet.
//
// A lane may have only so many calls in flight; the limit comes from an
// AIMD controller elsewhere and is set here with [Queue.SetLimit]. A call
// asks for a slot with [Queue.Acquire] and gives it back with
// [Queue.ReleaseTenant]. This package decides who goes next, and why each
// rule exists:
//
//   - Memory is bounded by configuration, not by traffic. At most
//     [Config.Capacity] fresh calls wait; one more is refused at once with
//     [ErrFull], so the proxy can answer 503 with Retry-After instead of
//     holding the request open without limit. A full queue does not
//     refuse a call more urgent than some fresh call waiting: the least
//     urgent waiting call (the newest of the tenant with the most waiting
//     at that urgency) gets ErrFull instead and leaves, so batch items
//     (u=5) that fill a lane's queue never turn an interactive call away.
//
//   - Urgency comes from the client. The HTTP Priority header of RFC 9218
//     carries an urgency from 0 (most urgent) to 7; [ParsePriority] reads it
//     without allocating, and the default is 3. An interactive call (u=0)
//     overtakes a batch item (u=5) queued long before it, whatever its
//     tenant.
//
//   - Tenants share a lane. A call names its tenant ([Priority.Tenant]):
//     a team, a client, a batch job. Within one urgency the slot goes to
//     the tenant with waiting calls that holds the fewest slots, and among
//     those to the one served least recently, so two jobs progress at the
//     same rate however many calls each keeps waiting, and a tenant with 2
//     clients is not crowded out by one with 32. Each tenant's own calls
//     go first in, first out. At most [Config.MaxTenants] tenants are kept
//     apart; the calls of further tenants count as one, reported as
//     [OtherTenants], so memory stays bounded whatever names callers send.
//     [Queue.Tenants] reports each tenant's waiting and in-flight calls.
//
//   - Retries cannot starve. A call that failed and is retried has already
//     waited once and was already accepted: it goes ahead of the fresh calls
//     of its urgency, of every tenant, and a few waiting places
//     ([Config.RetryReserve]) are kept for retries only, as Phoenix's
//     executor keeps room for requeued work, so a full queue of fresh calls
//     does not turn an accepted call into a lost one.
//
//   - A provider that says Retry-After is obeyed. [Queue.PauseUntil] stops
//     all grants until the given time; when it comes, waiting calls are let
//     out by a timer, without anyone calling ReleaseTenant: all of them if
//     no call is in flight, else one, and the others once a call in flight
//     has ended outside a pause.
//
//   - A client that leaves takes its call with it. When the context passed
//     to Acquire ends, the call leaves the queue at once and nothing is sent
//     upstream on its behalf. If a slot was granted at the same moment, the
//     slot is given back to the next waiter, so no slot leaks.
//
//   - The controller learns under which limit a call went. A limit that
//     is cut while a call's goroutine wakes from its wait has already let
//     that call out: [Queue.AcquireAt] returns the instant of the grant,
//     by the queue's clock, so that an answer to a call let out before the
//     cut is not taken for one sent after it.
//
//   - Nothing is lost on shutdown. [Queue.Drain] waits until no call waits
//     or runs; [Queue.Close] answers every call still waiting with
//     [ErrClosed].
//
// The design follows golang.org/x/sync/semaphore: a mutex around the state
// and, for each waiting call, a channel on which its answer is delivered.
// The waiters are kept in linked lists, one per urgency for retries and one
// per tenant and urgency for fresh calls, so a cancelled waiter leaves in
// O(1) and a grant costs at most a look at each tenant waiting at its
// urgency. There is no polling and no goroutine per waiter, and the package
// starts no goroutine of its own: the end of a pause is a time.AfterFunc
// timer, stopped by Close. Why the share is counted in slots held rather
// than in turns taken is in DESIGN.md.
//
// The package knows nothing of HTTP or of the controller that sets the
// limit.
package queue
