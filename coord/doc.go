// Package coord coordinates the Governors of many replicas over Redis.
//
// Governor runs as a sidecar, once per pod, so a service with 20 replicas
// has 20 Governors calling one provider account, whose rate limit they all
// share. Alone, each would learn the account's limit by its own 429s, and
// together they would overshoot it twenty times over. With coordination, a
// lane (upstream, credential, model) is governed once for every Governor
// that uses it: they share one concurrency target, one pause, one pacing
// bucket, and each uses its fair share of the target.
//
// # What is shared
//
// Every key of a lane carries the lane id (upstream, model and a short hash
// of the credential: never the credential) in a hash tag, so a lane's keys
// live in one Redis Cluster slot:
//
//	governor:{<lane id>}:state    hash: target, lastdec, level, paused, paused_at, ok_at, rate, burst, rate_at, ceil, probes, probe_at, rtt, tried, up
//	governor:{<lane id>}:members  sorted set: instance id scored by its lease expiry (Unix ms)
//	governor:{<lane id>}:demand   hash: instance id -> "calls in flight + queued,calls in flight"
//	governor:{<lane id>}:synced   hash: instance id -> its last sync (Unix ms)
//	governor:{<lane id>}:gcra     the theoretical arrival time of the pacing bucket (Unix ms)
//
// Values are numbers; member names are instance ids (GOVERNOR_INSTANCE).
//
// # The protocol
//
// Each Governor keeps its own controller (package aimd) for every lane, and
// syncs every lane every SyncInterval (and at once after a change of its
// limit or a pause) with one Lua script per lane, pipelined in one round
// trip and atomic on the server (see [Coordinator.Sync]):
//
//   - the Governor's lease is renewed (expiry = now + LeaseTTL) and its
//     demand recorded; expired members and their demands are removed, so a
//     Governor that dies gives its share back within LeaseTTL;
//   - the increase its controller made since the last sync is added to the
//     shared target, unless a decrease the Governor had not yet seen came
//     in between (the increase was earned at the old, larger target), and
//     only up to what the Governors use: the sum of their demands, plus one;
//   - a decrease lowers the shared target only if the call that caused it
//     was dispatched a round trip after the shared last decrease (until
//     then the others' calls sent at their old shares are still in flight)
//     by a Governor that knew of that decrease: one decrease per round trip
//     across every Governor, as one controller would make, and none for
//     429s of calls sent at a share that was already cut elsewhere; the
//     target is clamped to [1, max];
//   - the ceiling: the limit at which the last decrease came (ceil). Until
//     a probe is due (probe_at), increases stop just below it; then the
//     target may reach it, one slot above the hold; if the target holds
//     there for two round trips (tried: since when) while the Governors
//     want more, the capacity grew, and the ceiling rises by up slots (1,
//     2, 4...) and is probed again. A gentle decrease at the ceiling (or
//     one slot above it) is that probe failing under a stable cap: the
//     target goes back just below the ceiling, not by the controller's
//     cut, and the next probe waits twice as long (4, 8, 16, then every 32
//     round trips, rtt being the latency the Governors report). Any other
//     decrease (the first, one below the ceiling: the capacity fell, a
//     repeat decrease) is the reporter's cut (its gentle one if a call of
//     any Governor succeeded a round trip after the last decrease: a
//     Governor that adopted that decrease late is in no repeat), from the calls in flight if
//     the target ran ahead of them (a slow start), and starts the probes
//     again from 4 round trips. So one lane of many Governors makes one 429
//     per probe, not one per Governor's probe, and a probe that fails costs
//     one slot;
//   - a pause (the provider's Retry-After) is merged as the latest of the
//     two instants, so one Governor's 429 pauses the lane everywhere; as a
//     pause of one Governor is lifted by a success, a shared pause ends
//     everywhere, in the Governor that asked for it too, when any
//     Governor's call succeeds after it was asked for (under a concurrency
//     cap the hint was for one call; under a request budget nothing
//     succeeds and the pause holds everywhere);
//   - a pacing rate learned from the provider's rate-limit headers is
//     published with its bucket size.
//
// The script returns the shared record and the live members with their
// demands and last syncs; the Governor adopts the shared target
// ([aimd.Controller.Adopt]) and takes its fair share of the shared limit by
// water-filling ([Shares]): its queue lets out as many calls as that share
// at once if it shrank or held (it takes no slot from anyone); a share that
// grew takes only what the others' calls leave, their shares or more if
// more are still in flight (so a joining Governor takes its share as the
// others' calls finish), and only once every other Governor has synced
// since it grew (their last syncs, or else a sync interval and a half),
// when they have given up theirs: else a joining Governor, or a remainder
// moving from one to another, would put both over the cap for a moment.
// Meanwhile its controller, which holds the shared target, counts the lane
// as in use when the Governor uses its whole share. When a rate is known, each dispatch books a slot in the
// shared bucket with a GCRA script ([Coordinator.Reserve]) and waits what it
// returns.
//
// # Failing open
//
// Redis is never on the path of a call in a way that can block it: every
// command has a short timeout, and the first failure switches the
// Coordinator to local mode, in which Sync and Reserve fail at once. The
// Governor's lanes then keep their share as their local limit and go on
// with their local controllers and pacers. A background loop pings Redis
// and rejoins when it answers. Both transitions are logged ("redis
// coordination lost", "redis coordination restored") and counted
// (governor_redis_up, governor_redis_fallbacks_total).
//
// Times are the Governors' wall clocks (Unix milliseconds), which are
// assumed to agree to within a few milliseconds (NTP).
package coord
