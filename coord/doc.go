// Package coord coordinates the Governors of many replicas over Redis.
//
// Governor runs as a sidecar, once per pod, so a service with 20 replicas
// has 20 Governors calling one provider account, whose rate limit they all
// share. Alone, each would learn the account's limit by its own 429s, and
// together they would overshoot it twenty times over. With coordination, a
// lane (upstream, credential, model) is governed once for every Governor
// that uses it: they share one concurrency target, one pause, one pacing
// bucket, and each uses its fair share of the target. Token budgets stay
// counted by each Governor (package lane), which splits them by the live
// members a sync returns.
//
// The caller keeps its own controller (package aimd) per lane and calls
// [Coordinator.Sync] for its lanes every Config.SyncInterval (and at
// once after a change of a limit or a pause); a lane it parks (idle: it
// holds no share and syncs before it dispatches again, [Report.Parked])
// it may sync far less often, within the lease. One atomic Lua script per
// lane, pipelined in one round trip, merges its increase, decrease, pause
// and pacing rate into the shared record, renews its lease and returns the
// shared target with the live members' demands. The caller adopts that
// target ([aimd.Controller.Adopt]) and takes its fair share of it
// ([Shares]). One decrease per round trip is made across every Governor,
// as one controller would make; a Governor that stops syncing gives its
// share back within Config.LeaseTTL. A record that Redis lost (restarted
// empty, flushed, evicted) is made again at the next sync: the members it
// had count for a lease TTL more, so a share grows only as it would have if
// the record had kept them. When a pacing rate is known, each
// dispatch books a slot in the shared bucket ([Coordinator.Reserve]).
// DESIGN.md, beside this file, describes the protocol rule by rule.
//
// Every key of a lane carries the lane id (upstream, model and a short hash
// of the credential: never the credential) in a hash tag, so a lane's keys
// live in one Redis Cluster slot:
//
//	governor:{<lane id>}:state    hash: target, lastdec, level, paused, paused_at, ok_at, rate, burst, rate_at, ceil, probes, probe_at, rtt, tried, up, born, rate_cur, rate_prev, rate_half
//	governor:{<lane id>}:members  sorted set: instance id scored by its lease expiry (Unix ms)
//	governor:{<lane id>}:demand   hash: instance id -> "calls in flight + queued,calls in flight"
//	governor:{<lane id>}:synced   hash: instance id -> its last sync (Unix ms; negative: parked)
//	governor:{<lane id>}:max      hash: instance id -> its maximum target (the largest bounds the shared one)
//	governor:{<lane id>}:gcra     the theoretical arrival time of the pacing bucket (Unix ms)
//
// Values are numbers; member names are instance ids (Config.Instance).
// Besides, each time the Coordinator joins (see below) it runs every
// command of its scripts on keys governor:{probe/<instance>}:h, :z and :s,
// which it leaves empty or expiring at once: the Redis user needs PING,
// TIME (else clocks are taken to agree), script loading and running, and
// HMGET, HGET, HSET, HDEL, HVALS, ZADD, ZREM, ZRANGE, ZRANGEBYSCORE,
// PEXPIRE, GET and SET on governor:* keys.
//
// Redis is never on the path of a call in a way that can block it: every
// command has a short timeout (Config.Timeout), and the first failure
// switches the Coordinator to local mode, in which Sync and Reserve fail at
// once; the caller's lanes then keep their share as their local limit and
// go on with their local controllers and pacers. A background loop pings
// Redis and rejoins when it answers and runs the scripts' commands (a Redis
// that answers but refuses writes, full under maxmemory or a replica, or a
// user not allowed them, stays lost); Close stops it. Both transitions are
// logged ("redis coordination lost", "redis coordination restored"; past a
// loss and its end, those within 10 s are summed up in one line with
// flaps=N) and counted (governor_redis_up, governor_redis_fallbacks_total).
// Each failure logged carries its [Cause] (auth, noperm, refused, timeout,
// tls ...), as does [Coordinator.Cause] while the Coordinator is local;
// a new cause of the rejoins failing is logged ("redis coordination still
// lost"). A Redis that answers New and refuses what the options say, the
// credentials or the database number, fails New with a *[StartError]:
// a configuration to fix, not an outage to wait out.
//
// Instants in the record (Unix milliseconds) are on Redis's clock: a
// Coordinator measures its host's clock against Redis's (TIME) when it
// joins and every minute, and moves every instant it sends and reads by the
// difference, so Governors whose clocks are seconds apart still see each
// other's leases and book one bucket. Clocks within 10ms of Redis's are
// taken as agreeing with it.
package coord
