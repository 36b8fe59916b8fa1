package coord

import "github.com/redis/go-redis/v9"

// syncScript merges one Governor's report on a lane into the shared record
// and returns the record and the live members. It is the whole protocol of
// doc.go, atomic on the server.
//
// KEYS: state, members, demand, synced, maxima.
// ARGV: now, instance, lease expiry, "demand,in flight", max, initial target, increase,
// decrease target (empty: none), decrease's dispatch, decrease's
// instant, decrease level, paused until, rate, burst, key ttl, rate memory,
// the last shared decrease the reporter knew of, when the pause was asked
// for, the reporter's last success, 1 if the decrease is a collapse, the
// reporter's round-trip time (ms, 0: unknown), the reporter's gentle
// decrease ratio (0: unknown), the reporter's sync interval (ms; absent:
// 0), the span over which the largest rate published stands (ms; absent:
// 0, the last rate published stands), 1 if the reporter is parked (its
// last sync is then kept negative).
// Instants are Unix milliseconds.
//
// Returns: target, lastdec, level, paused, rate, burst, paused_at, born (when
// the record was made; 0: unknown), the last sync under the reporter's
// instance name before this one ("" if none) (as strings: Redis turns Lua
// numbers into integers), then instance, "demand,in flight", last sync (Unix ms, "" if
// the member did not say: an older version) triples. The target is bounded
// by the largest maximum of the members.
var syncScript = redis.NewScript(syncSource)

const syncSource = `
local now = tonumber(ARGV[1])
local max = tonumber(ARGV[5])
local st = redis.call('HMGET', KEYS[1], 'target', 'lastdec', 'level', 'paused', 'rate', 'burst', 'rate_at', 'paused_at', 'ok_at', 'ceil', 'probes', 'probe_at', 'rtt', 'tried', 'up', 'born', 'rate_cur', 'rate_prev', 'rate_half')
local target = tonumber(st[1]) or tonumber(ARGV[6])
local lastdec = tonumber(st[2]) or 0
local level = tonumber(st[3]) or 0
local paused = tonumber(st[4]) or 0
local rate = tonumber(st[5]) or 0
local burst = tonumber(st[6]) or 0
local rate_at = tonumber(st[7]) or 0
local paused_at = tonumber(st[8]) or 0

local ceil = tonumber(st[10]) or 0
local probes = tonumber(st[11]) or 0
local probe_at = tonumber(st[12]) or 0
local rtt = tonumber(st[13]) or 0
local tried = tonumber(st[14]) or 0
local up = tonumber(st[15]) or 0
if tonumber(ARGV[21]) > 0 then rtt = tonumber(ARGV[21]) end
local round = math.max(rtt, 100)
local sync = tonumber(ARGV[23]) or 0
-- When the record was made (0: by a version that did not say).
local born = tonumber(st[16]) or 0
if not st[1] then born = now end

-- The members: expired leases go, this one is renewed.
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  redis.call('HDEL', KEYS[3], unpack(gone))
  redis.call('HDEL', KEYS[4], unpack(gone))
  redis.call('HDEL', KEYS[5], unpack(gone))
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
-- The last sync under this instance name, for the reporter to tell whether
-- another Governor syncs under it too.
local prev = redis.call('HGET', KEYS[4], ARGV[2]) or ''
if ARGV[25] == '1' then
  redis.call('HSET', KEYS[4], ARGV[2], '-' .. ARGV[1])
else
  redis.call('HSET', KEYS[4], ARGV[2], ARGV[1])
end
redis.call('HSET', KEYS[5], ARGV[2], ARGV[5])

-- What every Governor wants (calls in flight and queued) and uses (calls
-- in flight), as of their last syncs.
local want, used, n = 0, 0, 0
local demands = redis.call('HVALS', KEYS[3])
for i = 1, #demands do
  local d, f = string.match(demands[i], '^([^,]*),?(.*)$')
  want = want + (tonumber(d) or 0)
  n = n + 1
  if used and tonumber(f) then
    used = used + tonumber(f)
  else
    used = nil -- a Governor that does not say (an older version)
  end
end
-- The largest maximum of the live members (older versions say none).
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
local maxima = redis.call('HMGET', KEYS[5], unpack(ids))
for i = 1, #maxima do
  local m = tonumber(maxima[i])
  if m and m > max then max = m end
end

local dec = tonumber(ARGV[8])
-- A reporter whose own maximum is below the shared target had its
-- controller held at that maximum: its cut is the same part of the shared
-- target.
local rmax = tonumber(ARGV[5])
if dec and ARGV[20] ~= '1' and rmax < target then
  dec = target * math.min(1, dec / rmax)
end
local seen = tonumber(ARGV[17])
local ok_at = math.max(tonumber(st[9]) or 0, tonumber(ARGV[19]))
-- A collapse is a storm seen by one Governor: nothing it sent got through.
-- If another Governor's call succeeded after the call behind it was sent,
-- the lane is not in a storm; the collapse stays local.
-- (Successes reach the record at syncs: one a round trip before the call
-- was sent shows the lane was not in a storm then.)
local storm = ARGV[20] ~= '1' or ok_at <= tonumber(ARGV[9]) - round
-- A repeat decrease (the reporter's controller had seen no success of a
-- call sent after the last decrease, so it cut hard) is no repeat for the
-- lane if any Governor's call succeeded a round trip after it: the
-- reporter only adopted that decrease late (joining, or at a sync). Its cut
-- is the gentle one.
local gentle = tonumber(ARGV[22]) or 0
if dec and ARGV[20] ~= '1' and gentle > 0 and ok_at > lastdec + round then
  dec = math.max(dec, gentle * target)
end
if dec and tonumber(ARGV[9]) > lastdec + round and seen >= lastdec and dec < target and storm then
  -- A decrease caused by a call sent a round trip after the last shared
  -- one (until then, calls the others sent at their old shares are still
  -- in flight: a 429 is explained by that decrease), by a Governor that
  -- knew of it. (One that did not sent the call at its old
  -- share: the last decrease explains it.) A decrease never raises the
  -- target that others lowered meanwhile.
  --
  -- The ceiling: the limit at which the last decrease came. A gentle
  -- decrease at that ceiling again (or one above it: the probe) is the
  -- probe one slot too many under a stable cap: the target goes just
  -- below it, where it holds, and the next probe waits longer. Any other
  -- decrease (the first, one below the ceiling: the capacity fell, a
  -- repeat or a collapse) is the reporter's cut, multiplicative.
  local pre = math.floor(target)
  if ARGV[20] ~= '1' and ceil > 0 and pre >= ceil and pre <= ceil + 1 and dec >= 0.75 * target then
    target = pre - 1
    probes = probes + 1
    ceil = pre
  else
    -- The cut is the reporter's, from what was in use if less than the
    -- target: a target that ran ahead of the calls in flight (a slow
    -- start, which doubles every round trip) is not what the provider
    -- refused.
    local ratio = math.min(1, dec / math.max(target, 1))
    ceil = pre
    if used and used > 0 and 1.25 * used + n < pre then
      target = math.min(dec, math.max(1, used * ratio))
    else
      target = dec
    end
    probes = 0
  end
  probe_at = tonumber(ARGV[10]) + round * math.min(4 * 2 ^ probes, 32)
  tried = 0
  up = 0
  lastdec = tonumber(ARGV[10])
  level = tonumber(ARGV[11])
elseif seen >= lastdec then
  -- An increase earned by calls answered before the reporter knew of the
  -- last decrease was made on the old, larger target: it is dropped, as
  -- the reporter's controller drops answers of calls sent before it.
  local grown = target + math.max(0, tonumber(ARGV[7]))
  -- Not past what the Governors use: their calls in flight and queued,
  -- and one more to learn whether the limit holds them back.
  grown = math.min(grown, math.max(target, want + 1))
  if ceil > 0 and now < probe_at then
    -- Hold just below the ceiling until the probe is due.
    grown = math.min(grown, math.max(target, ceil - 1))
  elseif ceil > 0 then
    -- The probe: up to the ceiling, one slot more than the hold. If the
    -- target holds there for two round trips, the capacity grew: the
    -- ceiling rises (by 1, 2, 4... slots) and is probed at once. The
    -- probe's slot is in use only once the Governor given it has synced
    -- and the others have synced since (they give it up): two sync
    -- intervals, which may be longer than the round trips.
    grown = math.min(grown, math.max(target, ceil))
    if tried == 0 and grown >= ceil and want > ceil then
      -- (A probe is a test only if the Governors want more than it.)
      tried = now
    elseif tried > 0 and now >= tried + 2 * round + 2 * sync then
      up = math.max(1, 2 * up)
      ceil = ceil + up
      tried = 0
    end
  end
  target = grown
end
if target > max then target = max end
if target < 1 then target = 1 end
if tonumber(ARGV[12]) > paused then
  paused = tonumber(ARGV[12])
  paused_at = tonumber(ARGV[18])
end
-- The pacing rate: the largest published over the last half of the span
-- to all of it (the current half's largest and the one before's), as a
-- lane's pacer keeps its bounds. Each Governor publishes a lower bound on
-- the provider's refill rate, learned from the reports of its own calls'
-- answers, which converges on the rate from below as reports come; the
-- largest is what one pacer reading every Governor's reports would have
-- learned. (The last one published would be one Governor's estimate from
-- its part of the reports: the shared bucket would refill below the
-- provider's while those converge.) A rate the provider lowers is followed
-- within the span. Published nowhere for the span, the last rate stands
-- until the rate memory runs out.
local rate_cur = tonumber(st[17]) or 0
local rate_prev = tonumber(st[18]) or 0
local rate_half = tonumber(st[19]) or 0
local half = (tonumber(ARGV[24]) or 0) / 2
if now - rate_half >= 2 * half then
  rate_cur, rate_prev, rate_half = 0, 0, now
elseif now - rate_half >= half then
  rate_cur, rate_prev, rate_half = 0, rate_cur, rate_half + half
end
if tonumber(ARGV[13]) > 0 then
  rate_cur = math.max(rate_cur, tonumber(ARGV[13]))
  burst = tonumber(ARGV[14])
  rate_at = now
end
if half > 0 and math.max(rate_cur, rate_prev) > 0 then
  rate = math.max(rate_cur, rate_prev)
elseif tonumber(ARGV[13]) > 0 then
  rate = tonumber(ARGV[13])
end
redis.call('HSET', KEYS[1], 'target', tostring(target), 'lastdec', tostring(lastdec), 'level', tostring(level),
  'paused', tostring(paused), 'rate', tostring(rate), 'burst', tostring(burst), 'rate_at', tostring(rate_at), 'paused_at', tostring(paused_at), 'ok_at', tostring(ok_at),
  'ceil', tostring(ceil), 'probes', tostring(probes), 'probe_at', tostring(probe_at), 'rtt', tostring(rtt),
  'tried', tostring(tried), 'up', tostring(up), 'born', tostring(born),
  'rate_cur', tostring(rate_cur), 'rate_prev', tostring(rate_prev), 'rate_half', tostring(rate_half))

local ttl = tonumber(ARGV[15])
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end

if now - rate_at > tonumber(ARGV[16]) then
  rate = 0
  burst = 0
end
-- A pause holds while no Governor's call succeeds: a success after it was
-- asked for shows the provider taking calls (a concurrency cap, where the
-- hint was for one call), as the local rule has it.
if ok_at > paused_at then
  paused = 0
end
local out = {tostring(target), tostring(lastdec), tostring(level), tostring(paused), tostring(rate), tostring(burst), tostring(paused_at), tostring(born), prev}
local demands = redis.call('HMGET', KEYS[3], unpack(ids))
local synced = redis.call('HMGET', KEYS[4], unpack(ids))
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = demands[i] or '0'
  out[#out + 1] = synced[i] or ''
end
return out
`

// gcraScript books n dispatches in a lane's shared token bucket by the
// generic cell rate algorithm: the bucket is one number, the theoretical
// arrival time (TAT) of the next call. A call may go at TAT - burst·T,
// where T = 1/rate; booking it moves TAT on by T. Like rate.Limiter's
// Reserve, a booking always succeeds and returns its wait; n bookings at
// once wait what n bookings one after the other would.
//
// KEYS: gcra. ARGV: now, T (ms), burst, n. Returns the n waits in ms, as
// strings.
var gcraScript = redis.NewScript(gcraSource)

const gcraSource = `
local now = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local n = tonumber(ARGV[4]) or 1
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local waits = {}
for i = 1, n do
  tat = tat + t
  local wait = tat - burst * t - now
  if wait < 0 then wait = 0 end
  waits[i] = tostring(wait)
end
redis.call('SET', KEYS[1], tostring(tat), 'PX', math.ceil(tat - now) + 1000)
return waits
`

// leaveScript gives a Governor's shares back at once (a clean shutdown).
//
// KEYS: members, demand, synced, maxima. ARGV: instance.
var leaveScript = redis.NewScript(leaveSource)

const leaveSource = `
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 2, 4 do redis.call('HDEL', KEYS[i], ARGV[1]) end
return 1
`

// probeScript runs every command the other scripts run, on keys of its
// own shaped like a lane's, which it leaves empty or expiring at once:
// join's check that Redis takes the scripts (a Redis full under maxmemory,
// a replica, or a user whose ACL lacks one of them would fail every sync).
//
// KEYS: a hash, a sorted set and a string (probeKeys). ARGV: the string's
// time to live (ms).
var probeScript = redis.NewScript(probeSource)

const probeSource = `
redis.call('HSET', KEYS[1], 'p', '1')
redis.call('HMGET', KEYS[1], 'p')
redis.call('HGET', KEYS[1], 'p')
redis.call('HVALS', KEYS[1])
redis.call('HDEL', KEYS[1], 'p')
redis.call('ZADD', KEYS[2], 0, 'p')
redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', 0)
redis.call('ZRANGE', KEYS[2], 0, -1)
redis.call('ZREM', KEYS[2], 'p')
redis.call('SET', KEYS[3], '1', 'PX', ARGV[1])
redis.call('GET', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return 1
`

// probeKeys are the keys join's check writes, in a lane of their own.
func probeKeys(instance string) []string {
	p := "governor:{probe/" + instance + "}:"
	return []string{p + "h", p + "z", p + "s"}
}

// maximaKey is the key of a lane's hash of its members' maxima. (It is not
// in the "demand,in flight" values, which older versions read.)
func maximaKey(lane string) string { return "governor:{" + lane + "}:max" }

// keys returns the keys of a lane. The lane id is in a hash tag so that a
// lane's keys share one Redis Cluster slot.
func keys(lane string) (state, members, demand, synced, gcra string) {
	p := "governor:{" + lane + "}:"
	return p + "state", p + "members", p + "demand", p + "synced", p + "gcra"
}
