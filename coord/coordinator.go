package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrLocal is returned by Sync and Reserve while the Coordinator is in
// local mode (Redis unreachable, slow or refusing): the caller governs on
// its own.
var ErrLocal = errors.New("coord: redis coordination is down; governing locally")

// Report is what one Governor tells the shared record of one lane at a sync.
type Report struct {
	// Lane is the lane id; the lane's keys are derived from it.
	Lane string
	// Max is the upper bound of the shared target.
	Max int
	// Initial is the target a lane's record starts with if it has none.
	Initial float64
	// Increase is what the local controller added to its target since
	// the last sync (not negative). It is dropped if a decrease newer than
	// SeenDecrease was made meanwhile.
	Increase float64
	// SeenDecrease is the shared last decrease this Governor last
	// adopted (zero: none).
	SeenDecrease time.Time
	// Decreased reports a decrease since the last sync: the local target
	// after it (DecreaseTarget), the dispatch of the call that caused it,
	// when it was made and the level at which it was made.
	Decreased          bool
	Collapsed          bool // the decrease was a collapse
	DecreaseTarget     float64
	DecreaseDispatched time.Time
	DecreaseAt         time.Time
	DecreaseLevel      float64
	// Demand is the lane's calls in flight plus queued in this Governor,
	// InFlight those in flight.
	Demand, InFlight int
	// PausedUntil is a pause the provider asked for (zero: none), at
	// PausedAt.
	PausedUntil, PausedAt time.Time
	// LastSuccess is when a call of the lane last succeeded here: a
	// success anywhere after a pause was asked for ends it.
	LastSuccess time.Time
	// Rate and Burst are the pacing the provider's rate-limit headers
	// showed (tokens per second and bucket size; zero: unknown). Rate is
	// a lower bound on the provider's refill rate: the shared one is the
	// largest the Governors published lately.
	Rate, Burst float64
	// Latency is the lane's round-trip time here (zero: unknown): the
	// shared record counts its holds and probes in round trips.
	Latency time.Duration
	// DecreaseRatio is the controller's gentle cut (aimd
	// Config.DecreaseRatio; zero: unknown), which a repeat decrease is
	// given when the lane is not in a repeat (see doc.go).
	DecreaseRatio float64
	// Parked says this Governor holds no share of the lane and dispatches
	// nothing on it before it syncs again unparked: the others need not
	// wait for its next sync to take slots it gave up (see OthersSynced).
	Parked bool
}

// Shared is the shared record of one lane after a sync.
type Shared struct {
	Target        float64
	LastDecrease  time.Time // zero if none
	DecreaseLevel float64
	PausedUntil   time.Time // zero if none, or ended by a success
	PausedAt      time.Time // when the pause was asked for
	Rate, Burst   float64   // zero if no Governor has learned a rate lately
	// Members is the number of live Governors on the lane, this one
	// included.
	Members int
	// Share is what this Governor may use of the shared limit,
	// floor(Target), now: Fair, less any calls the others still have in
	// flight beyond their fair shares.
	Share int
	// Fair is this Governor's part of the shared limit by water-filling
	// (Shares), the others' calls not counted. A Governor whose part
	// shrinks or holds takes no slot from anyone and may use Fair at once;
	// one whose part grows takes only Share.
	Fair int
	// OthersSynced is the earliest of the other live Governors' last
	// syncs: every one of them has synced since, and applied the shares
	// of the record as it was then. It is the sync's own instant when
	// there are no others, and zero when one of them does not say (an
	// older version).
	OthersSynced time.Time
}

// Coordinator shares lane state with the other Governors through Redis. It
// is safe for concurrent use. Create one with New and stop it with Close.
type Coordinator struct {
	cfg Config
	rdb *redis.Client
	log *slog.Logger

	up     atomic.Bool
	cause  atomic.Value  // Cause: the last failure's
	states *stateLog     // logs up's changes
	wake   chan struct{} // a failure: the loop starts pinging
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once

	fallbacks *metrics.Counter
	errors    *metrics.Counter
	syncTime  *metrics.PrometheusHistogram

	mu sync.Mutex
	// recalled is what the last syncs showed of each lane's record.
	recalled map[string]recalled
	// bookings are each lane's bookings not yet answered (see Reserve).
	bookings map[string]*booking

	// offset is Redis's clock less this host's, in milliseconds, as last
	// measured: every instant goes to Redis on Redis's clock (see
	// measureClock).
	offset atomic.Int64
	// twin is set once another Governor was seen syncing under this one's
	// instance name (see checkInstance).
	twin atomic.Bool
	// measured is when the offset was last measured (ns since born, on
	// the monotonic clock); clockCheck how often it is measured again.
	born       time.Time
	measured   atomic.Int64
	clockCheck atomic.Int64
}

// New returns a Coordinator for cfg and starts its background loop, which
// pings Redis while it is unreachable. It does not wait for Redis: if Redis
// does not answer at once, or refuses what it is asked (a user not allowed
// the commands, a replica, a full Redis), the Coordinator starts in local
// mode and joins when it can. If Redis answers and refuses what the
// options say, the credentials (WRONGPASS, NOAUTH) or the database
// number, which no wait can change, New fails with a *StartError, unless
// Config.LocalWhenRefused says to start in local mode all the same.
func New(cfg Config) (*Coordinator, error) {
	c := cfg.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := *c.Options
	opts.DialTimeout = c.Timeout
	opts.ReadTimeout = c.Timeout
	opts.WriteTimeout = c.Timeout
	opts.PoolTimeout = c.Timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1 // a failure means local mode, not a retry on the call's time
	opts.DialerRetries = 1
	// go-redis waits DialerRetryTimeout (default 100ms) after a failed
	// dial even when it tries no more: longer than Timeout, the wait
	// would turn every refused connection into a timeout.
	opts.DialerRetryTimeout = time.Nanosecond
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	co := &Coordinator{
		cfg:      c,
		rdb:      redis.NewClient(&opts),
		log:      c.Logger,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		born:     time.Now(),
		recalled: map[string]recalled{},
		bookings: map[string]*booking{},
	}
	co.states = &stateLog{log: c.Logger, instance: c.Instance, now: c.Now, up: co.up.Load}
	co.clockCheck.Store(int64(clockCheck))
	joinErr := co.join()
	cause := Classify(joinErr)
	if refusedForGood(cause) && !c.LocalWhenRefused {
		_ = co.rdb.Close()
		return nil, &StartError{Addr: opts.Addr, Cause: cause, Err: joinErr}
	}
	co.fallbacks = c.Metrics.NewCounter("governor_redis_fallbacks_total")
	co.errors = c.Metrics.NewCounter("governor_redis_errors_total")
	co.syncTime = c.Metrics.NewPrometheusHistogramExt("governor_redis_sync_seconds", syncBuckets)
	c.Metrics.NewGauge("governor_redis_up", func() float64 {
		if co.up.Load() {
			return 1
		}
		return 0
	})
	switch {
	case joinErr == nil:
		co.up.Store(true)
		co.log.Info("redis coordination on", "addr", opts.Addr, "instance", c.Instance)
	case answered(cause):
		co.errors.Inc()
		co.setCause(cause)
		co.states.lastErr = joinErr
		co.log.Warn("redis refuses coordination at start: governing locally until it accepts",
			"cause", cause, "err", joinErr, "addr", opts.Addr)
	default:
		co.errors.Inc()
		co.setCause(cause)
		co.states.lastErr = joinErr
		co.log.Warn("redis unreachable at start: governing locally until it answers",
			"cause", cause, "err", joinErr, "addr", opts.Addr)
	}
	go co.loop()
	return co, nil
}

// syncBuckets span a sync on loopback (100µs) to the longest timeout one
// would configure.
var syncBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

func (c Config) withDefaults() Config {
	if c.Instance == "" {
		c.Instance = defaultInstance()
	}
	if c.InstanceName == "" {
		c.InstanceName = "Config.Instance"
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// defaultInstance is hostname-pid-random.
func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "governor"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Up reports whether coordination is on: Redis answered the last command.
func (co *Coordinator) Up() bool { return co.up.Load() }

// Cause says why coordination is off: the cause of the last failure
// (CauseAuth, CauseTimeout ...); empty while it is on.
func (co *Coordinator) Cause() Cause {
	if co.up.Load() {
		return ""
	}
	c, _ := co.cause.Load().(Cause)
	return c
}

// setCause records the cause of the last failure.
func (co *Coordinator) setCause(c Cause) { co.cause.Store(c) }

// Close stops the background loop and closes the connections to Redis.
func (co *Coordinator) Close() error {
	var err error
	co.closed.Do(func() {
		close(co.stop)
		<-co.done
		co.states.close()
		err = co.rdb.Close()
	})
	return err
}

// loop pings Redis while the Coordinator is in local mode, and ends the
// local mode when it answers.
func (co *Coordinator) loop() {
	defer close(co.done)
	t := time.NewTicker(co.cfg.SyncInterval)
	defer t.Stop()
	for {
		if co.up.Load() {
			select {
			case <-co.stop:
				return
			case <-co.wake:
			}
			continue
		}
		select {
		case <-co.stop:
			return
		case <-t.C:
		}
		err := co.join()
		if err != nil {
			co.errors.Inc()
			co.setCause(Classify(err))
			co.states.still(err)
			continue
		}
		if co.up.CompareAndSwap(false, true) {
			co.states.changed(true, nil)
		}
	}
}

// join pings Redis, loads the scripts (a restarted Redis has lost them),
// checks that Redis runs the scripts' commands (probeScript), and measures
// its clock: one
// round trip each for the ping (which may open a connection), the rest (one
// pipeline) and the clock, each within the timeout, so that a Redis that
// can answer a sync within it can join. Rejoining a Redis that answers PING
// but refuses writes (full under maxmemory with noeviction, a replica after
// a failover, an ACL) would fail every sync and switch the lanes back and
// forth.
func (co *Coordinator) join() error {
	ctx, cancel := context.WithTimeout(context.Background(), co.cfg.Timeout)
	err := co.rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), co.cfg.Timeout)
	pipe := co.rdb.Pipeline()
	loadScripts(ctx, pipe)
	probeScript.EvalSha(ctx, pipe, probeKeys(co.cfg.Instance), co.cfg.Timeout.Milliseconds()+1)
	_, err = pipe.Exec(ctx)
	cancel()
	if err != nil {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), co.cfg.Timeout)
	co.measureClock(ctx, true)
	cancel()
	return nil
}

// Clock offsets: how often the offset to Redis's clock is measured again
// while coordinated; the offset below which clocks are taken to agree (as
// NTP keeps them), which is also the least change taken up after a join (a
// new offset moves every instant this Governor sends); the offset that is
// logged.
const (
	clockCheck     = time.Minute
	clockTolerance = 10 * time.Millisecond
	clockWarn      = time.Second
)

// measureClock measures the offset of Redis's clock to this host's (TIME,
// against the middle of its round trip) and takes it up at a join, or if
// it moved by more than clockTolerance. Instants in the shared record are
// compared across Governors (leases, the shared bucket, decreases and
// pauses): a host whose clock is seconds off would otherwise see the
// others' leases expired and take their shares, or book the shared bucket
// seconds ahead of them. A Redis that does not answer TIME (an ACL) leaves
// the offset as it was.
func (co *Coordinator) measureClock(ctx context.Context, join bool) {
	co.measured.Store(int64(time.Since(co.born)))
	before := co.cfg.Now()
	redisNow, err := co.rdb.Time(ctx).Result()
	if err != nil {
		co.log.Debug("redis clock not measured", "err", err)
		return
	}
	after := co.cfg.Now()
	off := redisNow.Sub(before.Add(after.Sub(before) / 2)).Round(time.Millisecond)
	if off.Abs() <= clockTolerance {
		off = 0
	}
	old := time.Duration(co.offset.Load()) * time.Millisecond
	if off == old || !join && (off-old).Abs() <= clockTolerance {
		return
	}
	co.offset.Store(off.Milliseconds())
	if off.Abs() >= clockWarn || old.Abs() >= clockWarn {
		co.log.Warn("this host's clock differs from redis's: shared instants are taken on redis's clock",
			"redis_ahead_by", off, "instance", co.cfg.Instance)
	}
}

// clockDue reports whether the offset is due to be measured again.
func (co *Coordinator) clockDue() bool {
	return int64(time.Since(co.born))-co.measured.Load() >= co.clockCheck.Load()
}

// failed switches to local mode after a failed command. ctx is the
// caller's: a caller that gave up is not Redis's failure, but a command
// that outlived the timeout is.
func (co *Coordinator) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	co.errors.Inc()
	co.setCause(Classify(err))
	if co.up.CompareAndSwap(true, false) {
		co.fallbacks.Inc()
		co.states.changed(false, err)
		select {
		case co.wake <- struct{}{}:
		default:
		}
	}
	return fmt.Errorf("%w: %v", ErrLocal, err)
}

// Sync sends one report per lane and returns each lane's shared record, in
// order, in one round trip to Redis (a pipeline of script calls). It fails
// at once with ErrLocal in local mode, and switches to local mode when
// Redis fails or takes longer than the timeout.
func (co *Coordinator) Sync(ctx context.Context, reports []Report) ([]Shared, error) {
	if !co.up.Load() {
		return nil, ErrLocal
	}
	if len(reports) == 0 {
		return nil, nil
	}
	if co.clockDue() {
		mctx, cancel := context.WithTimeout(ctx, co.cfg.Timeout)
		co.measureClock(mctx, false)
		cancel()
	}
	start := time.Now()
	now := co.cfg.Now()
	off := co.offset.Load()
	tctx, cancel := context.WithTimeout(ctx, co.cfg.Timeout)
	defer cancel()
	cmds, err := co.runSync(tctx, reports, now, off)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Redis restarted and lost its scripts: load them and try once more.
		if err = co.load(tctx); err == nil {
			cmds, err = co.runSync(tctx, reports, now, off)
		}
	}
	if err != nil {
		co.forgetSyncs()
		return nil, co.failed(ctx, err)
	}
	co.syncTime.UpdateDuration(start)
	out := make([]Shared, len(reports))
	for i, cmd := range cmds {
		vals, err := cmd.StringSlice()
		if err != nil {
			return nil, co.failed(ctx, err)
		}
		if out[i], err = co.parseShared(reports[i], vals, now, off); err != nil {
			return nil, co.failed(ctx, err)
		}
	}
	return out, nil
}

// runSync runs the sync script of every report, with the instants on
// Redis's clock (off, see toRedis).
func (co *Coordinator) runSync(ctx context.Context, reports []Report, now time.Time, off int64) ([]*redis.Cmd, error) {
	pipe := co.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reports))
	for i, r := range reports {
		state, members, demand, synced, _ := keys(r.Lane)
		dec, decDispatched, decAt, collapsed := "", int64(0), int64(0), "0"
		if r.Decreased && r.Collapsed {
			collapsed = "1"
		}
		if r.Decreased {
			dec, decDispatched, decAt = num(r.DecreaseTarget), toRedis(r.DecreaseDispatched, off), toRedis(r.DecreaseAt, off)
		}
		cmds[i] = syncScript.EvalSha(ctx, pipe, []string{state, members, demand, synced, maximaKey(r.Lane)},
			toRedis(now, off), co.cfg.Instance, toRedis(now.Add(co.cfg.LeaseTTL), off), demandOf(r), r.Max, num(r.Initial),
			num(r.Increase), dec, decDispatched, decAt, num(r.DecreaseLevel),
			toRedis(r.PausedUntil, off), num(r.Rate), num(r.Burst), co.keyTTL().Milliseconds(), rateMemory.Milliseconds(), toRedis(r.SeenDecrease, off), toRedis(r.PausedAt, off), toRedis(r.LastSuccess, off), collapsed, r.Latency.Milliseconds(), num(r.DecreaseRatio), co.cfg.SyncInterval.Milliseconds(), rateSpan.Milliseconds(), parkedArg(r.Parked))
	}
	_, err := pipe.Exec(ctx)
	return cmds, err
}

// parkedArg is a report's parked flag for the sync script.
func parkedArg(p bool) string {
	if p {
		return "1"
	}
	return "0"
}

// syncMark is what the record keeps of a sync at now (Unix ms on Redis's
// clock): the instant, negative for a parked member.
func syncMark(now int64, parked bool) int64 {
	if parked {
		return -now
	}
	return now
}

// demandOf is a report's "demand,in flight" for the record: a Governor
// wants no more than its maximum.
func demandOf(r Report) string {
	d := max(r.Demand, 0)
	if r.Max > 0 {
		d = min(d, r.Max)
	}
	return strconv.Itoa(d) + "," + strconv.Itoa(max(r.InFlight, 0))
}

// load loads the scripts into Redis's script cache, in one round trip.
func (co *Coordinator) load(ctx context.Context) error {
	pipe := co.rdb.Pipeline()
	loadScripts(ctx, pipe)
	_, err := pipe.Exec(ctx)
	return err
}

// loadScripts queues the loading of every script the Coordinator runs.
func loadScripts(ctx context.Context, pipe redis.Pipeliner) {
	for _, s := range []*redis.Script{syncScript, gcraScript, leaveScript, probeScript} {
		s.Load(ctx, pipe)
	}
}

// keyTTL is how long a lane's keys outlive the last sync of any Governor.
func (co *Coordinator) keyTTL() time.Duration { return max(20*co.cfg.LeaseTTL, time.Minute) }

// rateMemory is how long a published pacing rate stands without being
// published again.
const rateMemory = time.Minute

// rateSpan is how long the largest pacing rate published stands against
// lower ones (from half of it to all of it): as long as a lane's pacer
// keeps a bound on the rate (package lane's rateMemory).
const rateSpan = 10 * time.Second

// parseShared reads a sync script's answer to r, its instants on Redis's
// clock (off, see toRedis).
func (co *Coordinator) parseShared(r Report, vals []string, now time.Time, off int64) (Shared, error) {
	if len(vals) < 9 || (len(vals)-9)%3 != 0 {
		return Shared{}, fmt.Errorf("coord: sync script returned %d values", len(vals))
	}
	f := make([]float64, 8)
	for i := range f {
		v, err := strconv.ParseFloat(vals[i], 64)
		if err != nil {
			return Shared{}, fmt.Errorf("coord: sync script returned %q: %w", vals[i], err)
		}
		f[i] = v
	}
	s := Shared{Target: f[0], DecreaseLevel: f[2], Rate: f[4], Burst: f[5],
		LastDecrease: fromRedis(f[1], off), PausedUntil: fromRedis(f[3], off), PausedAt: fromRedis(f[6], off)}
	prev, _ := strconv.ParseInt(vals[8], 10, 64)
	co.checkInstance(r.Lane, prev, syncMark(toRedis(now, off), r.Parked))
	mems := make([]Member, 0, (len(vals)-9)/3)
	for i := 9; i+2 < len(vals); i += 3 {
		ds, fs, _ := strings.Cut(vals[i+1], ",")
		d, _ := strconv.Atoi(ds)
		f, _ := strconv.Atoi(fs)
		m := Member{Instance: vals[i], Demand: d, InFlight: f}
		if v, err := strconv.ParseInt(vals[i+2], 10, 64); err == nil && v != 0 {
			m.Parked = v < 0
			m.Synced = fromRedis(float64(max(v, -v)), off)
		}
		mems = append(mems, m)
	}
	slices.SortFunc(mems, func(a, b Member) int {
		switch {
		case a.Instance < b.Instance:
			return -1
		case a.Instance > b.Instance:
			return 1
		}
		return 0
	})
	s.Members = len(mems)
	// Every other Governor has synced since OthersSynced (an older version
	// that does not say: unknown).
	s.OthersSynced = now
	for _, m := range mems {
		if m.Instance == co.cfg.Instance || m.Parked {
			// (A parked member dispatches nothing before it syncs again.)
			continue
		}
		if m.Synced.IsZero() {
			s.OthersSynced = time.Time{}
			break
		}
		if m.Synced.Before(s.OthersSynced) {
			s.OthersSynced = m.Synced
		}
	}
	// Who gets an integer remainder turns every remainderTurn, at the
	// same instant for every Governor (on Redis's clock), so that no one
	// is always the one without; rarely, since a turn moves shares before
	// every Governor has seen it.
	limit := int(math.Floor(s.Target))
	shares := Shares(limit, mems, int(toRedis(now, off)/remainderTurn.Milliseconds()))
	// A share is what is left of the limit once the others' calls are
	// counted: their shares, or more if more are still in flight (sent
	// at a larger share before it shrank). So a Governor joining, or
	// given slots another had, takes them as the other's calls finish,
	// not over the cap at once.
	left := limit
	for i, m := range mems {
		if m.Instance != co.cfg.Instance {
			left -= max(shares[i], m.InFlight)
		}
	}
	for i, m := range mems {
		if m.Instance == co.cfg.Instance {
			s.Fair = shares[i]
			s.Share = max(0, min(shares[i], left))
		}
	}
	if most := co.recall(r.Lane, int64(f[7]), s.Members, now, off); most > s.Members {
		part := max(1, limit/most)
		s.Fair, s.Share = min(s.Fair, part), min(s.Share, part)
	}
	if r.Max > 0 {
		// The others' maxima may bound the target above this one's.
		s.Fair, s.Share = min(s.Fair, r.Max), min(s.Share, r.Max)
	}
	return s, nil
}

// recalled is what a Coordinator remembers of a lane's record: when it was
// made (Unix ms on Redis's clock, 0: unknown) and its members at the last
// sync; after the record was lost and made again, the members it had and
// until when they count; and its own last sync (Unix ms on Redis's clock,
// 0: unknown).
type recalled struct {
	born    int64
	members int
	lost    int
	until   time.Time
	synced  int64
}

// checkInstance warns, once, when the record of lane shows that another
// Governor synced under this one's instance name since its own last sync
// (prev, 0: none) at synced: two Governors under one name (an Instance
// set alike for every replica) count as one member, and
// each takes that member's share.
func (co *Coordinator) checkInstance(lane string, prev, synced int64) {
	co.mu.Lock()
	r := co.recalled[lane]
	shared := r.synced > 0 && prev > 0 && prev != r.synced
	r.synced = synced
	co.recalled[lane] = r
	co.mu.Unlock()
	if shared && co.twin.CompareAndSwap(false, true) {
		co.log.Error("another governor syncs under this instance name: the two count as one and may send twice their share; give each its own ("+co.cfg.InstanceName+", or leave it empty)",
			"instance", co.cfg.Instance, "lane", lane)
	}
}

// forgetSyncs forgets this Governor's last syncs: after a sync that failed,
// Redis may have run it.
func (co *Coordinator) forgetSyncs() {
	co.mu.Lock()
	defer co.mu.Unlock()
	for lane, r := range co.recalled {
		r.synced = 0
		co.recalled[lane] = r
	}
}

// recall returns how many Governors the lane's limit is to be split among
// at a sync that found members in a record made at born: members, or, if
// the record was lost and made again (Redis restarted empty, flushed, or
// the record evicted) within a lease, the members it had before, for the
// Governors it forgot may still be sending at their old shares (they come
// back at their next sync, which may be a second away if they lost Redis
// too).
func (co *Coordinator) recall(lane string, born int64, members int, now time.Time, off int64) int {
	co.mu.Lock()
	defer co.mu.Unlock()
	r := co.recalled[lane]
	if born > 0 && r.born > 0 && born != r.born && r.members > members {
		r.lost, r.until = r.members, fromRedis(float64(born), off).Add(co.cfg.LeaseTTL)
	}
	if born > 0 {
		r.born = born
	}
	r.members = members // (seen: a record lost again holds only these)
	most := members
	if r.lost > members && now.Before(r.until) {
		most = r.lost
	} else {
		r.lost = 0
	}
	co.recalled[lane] = r
	return most
}

// remainderTurn is how long the integer remainders of the shares stay
// with the same members.
const remainderTurn = 10 * time.Second

// Leave gives this Governor's shares of the lanes back at once, so the
// others need not wait for its leases to expire (a clean shutdown).
func (co *Coordinator) Leave(ctx context.Context, lanes []string) error {
	co.mu.Lock()
	for _, l := range lanes {
		delete(co.recalled, l)
	}
	co.mu.Unlock()
	if !co.up.Load() || len(lanes) == 0 {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, co.cfg.Timeout)
	defer cancel()
	pipe := co.rdb.Pipeline()
	for _, l := range lanes {
		_, members, demand, synced, _ := keys(l)
		leaveScript.Eval(tctx, pipe, []string{members, demand, synced, maximaKey(l)}, co.cfg.Instance)
	}
	if _, err := pipe.Exec(tctx); err != nil {
		return co.failed(ctx, err)
	}
	return nil
}

// toRedis is t in Unix milliseconds on Redis's clock, which is off
// milliseconds ahead of this host's; zero for the zero time.
func toRedis(t time.Time, off int64) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli() + off
}

// fromRedis is the instant v (Unix milliseconds on Redis's clock) on this
// host's clock; the zero time for v <= 0.
func fromRedis(v float64, off int64) time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(v) - off)
}

// num renders a float for a script argument.
func num(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "0"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
