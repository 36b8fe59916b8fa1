package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// A lane is the unit Governor governs: one upstream, one credential, one
// model, because providers limit per account and per model. Each lane has
// its own queue and controller, so a 429 for one model or key never slows
// another. The lane feeds each attempt's outcome to its controller and sets
// its queue's limit from the controller's.
type lane struct {
	id       string // upstream/model/credential-hash; safe to show and to use as a label
	upstream *upstream
	model    string
	cred     [sha256.Size]byte // the credential's full hash (its lane key)
	credHash string            // short hash of the credential, never the credential

	q *queue.Queue

	mu   sync.Mutex // orders ObserveAt with the SetLimit that follows it
	ctrl *aimd.Controller

	pausedUntil time.Time  // guarded by mu; also kept by q
	co          *laneCoord // guarded by mu; nil without a Coordinator
	pace        pacer
	m           *laneMetrics

	// lastUsed is when a call last took the lane or finished an attempt
	// in it (Unix nanoseconds), for eviction (see lanes.evictIdle).
	lastUsed atomic.Int64
}

// laneKey identifies a lane. cred is the full hash, so that two keys whose
// short hashes collide still get separate lanes.
type laneKey struct {
	upstream *upstream
	cred     [sha256.Size]byte
	model    string
}

// credentialHeaders identify the account a call is billed to.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Openai-Organization", "Openai-Project"}

// credentialHash hashes the credential headers of a client's request as
// they are sent upstream: a credential header named in Connection is
// hop-by-hop (see stripHopHeaders), so it counts as absent. The hash is
// shown shortened; the credential itself is never stored. (Not hashed from
// a buffer on the stack in one call, which saves the hasher's allocation:
// the handler's goroutine then grows past 4 KiB of stack before its call
// waits in the queue, and keeps 8 KiB per waiting call; see BENCHMARKS.md.)
func credentialHash(h *fasthttp.RequestHeader) [sha256.Size]byte {
	hop := len(h.Peek(fasthttp.HeaderConnection)) > 0 // most calls have no Connection header
	d := sha256.New()
	for _, name := range credentialHeaders {
		v := h.Peek(name)
		if hop && len(v) > 0 && namedInConnection(h, name) {
			v = nil
		}
		d.Write([]byte(name))
		d.Write([]byte{0})
		d.Write(v)
		d.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	d.Sum(sum[:0])
	return sum
}

// labelSafe maps a model name to the characters that are safe in a lane id
// and a metric label, bounded in length.
func labelSafe(s string) string {
	if s == "" {
		return "none"
	}
	b := []byte(s[:min(len(s), 64)])
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-@/", c) >= 0) {
			b[i] = '_'
		}
	}
	return string(b)
}

// otherModel groups the models of new lanes once MaxLanes lanes exist.
const otherModel = "other"

// laneIdleEvict is how long a lane must have been unused, with nothing
// waiting or in flight, before a new lane may evict it: at least this, and
// at least twice the longest wait between a call's attempts (MaxPause,
// BackoffMax), so that a lane is not evicted under a call about to retry.
const laneIdleEvict = 2 * time.Minute

// lanes holds every lane, created on first use.
//
// Lanes are bounded, because request headers and bodies choose them. Once
// MaxLanes exist, a new model of a known credential shares that
// credential's "other" lane (isolation is per credential, so that costs
// nothing but per-model accounting). A new credential, or a known one's
// first "other" lane, evicts the least recently used idle lane (see
// laneIdleEvict); with none idle long enough, a new credential is refused (503, nothing
// sent upstream), which keeps every credential's calls apart from every
// other's while bounding the lanes at 2×MaxLanes.
type lanes struct {
	cfg     *Config
	set     *metrics.Set
	log     *slog.Logger
	evicted *metrics.Counter
	idle    time.Duration // unused this long, an idle lane may be evicted

	// kick asks the sync loop for a sync now; nil without a Coordinator.
	kick chan struct{}

	mu      sync.RWMutex
	byKey   map[laneKey]*lane
	ordered []*lane                   // in creation order, for /governor/lanes
	creds   map[[sha256.Size]byte]int // lanes per credential
	// leaving are the ids of evicted lanes whose shares the sync loop is
	// to give back to the Coordinator (see takeLeaving); nil without one.
	leaving []string
}

func newLanes(cfg *Config) *lanes {
	ls := &lanes{cfg: cfg, set: cfg.Metrics, log: cfg.Logger, byKey: map[laneKey]*lane{},
		creds:   map[[sha256.Size]byte]int{},
		idle:    max(laneIdleEvict, 2*cfg.MaxPause, 2*cfg.BackoffMax),
		evicted: cfg.Metrics.NewCounter("governor_lanes_evicted_total")}
	if cfg.Coordinator != nil {
		ls.kick = make(chan struct{}, 1)
	}
	return ls
}

// errTooManyLanes refuses a call whose credential would need a lane beyond
// the bound.
var errTooManyLanes = &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeTooManyLanes, RetryAfter: maxRetryAfterSeconds,
	Message: "Governor: the lane limit (GOVERNOR_MAX_LANES) is reached and no lane has been idle long enough to make room for a new credential; retry later"}

// forRequest returns the lane of a client's request to up, or
// errTooManyLanes. It reads the client's request, not the one built for the
// upstream (see upstreamRequest), and finds the same lane.
func (ls *lanes) forRequest(up *upstream, req *fasthttp.Request) (*lane, *apiError) {
	return ls.get(up, credentialHash(&req.Header), modelOf(req.Body()))
}

func (ls *lanes) get(up *upstream, cred [sha256.Size]byte, model string) (*lane, *apiError) {
	now := ls.cfg.Now()
	key := laneKey{up, cred, model}
	ls.mu.RLock()
	l := ls.byKey[key]
	ls.mu.RUnlock()
	if l != nil {
		l.lastUsed.Store(now.UnixNano())
		return l, nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l = ls.byKey[key]; l == nil && len(ls.byKey) >= ls.cfg.MaxLanes {
		// Bound the lanes (and metric series) that request bodies can
		// create: new models share one lane per upstream and credential.
		key.model = otherModel
		l = ls.byKey[key]
		if l == nil && !ls.evictIdleLocked(now) && ls.creds[cred] == 0 {
			return nil, errTooManyLanes
		}
	}
	if l == nil {
		l = ls.newLane(key)
		// A lane evicted and back before its share was given back keeps
		// its place in the Coordinator.
		ls.leaving = slices.DeleteFunc(ls.leaving, func(id string) bool { return id == l.id })
		ls.byKey[key] = l
		ls.ordered = append(ls.ordered, l)
		ls.creds[cred]++
	}
	l.lastUsed.Store(now.UnixNano())
	return l, nil
}

// evictIdleLocked removes the least recently used lane that has nothing
// waiting or in flight and has been unused for laneIdleEvict, with its
// metric series. It reports whether it removed one. It requires ls.mu to
// be held for writing.
func (ls *lanes) evictIdleLocked(now time.Time) bool {
	victim := -1
	var oldest int64
	cutoff := now.Add(-ls.idle).UnixNano()
	for i, l := range ls.ordered {
		used := l.lastUsed.Load()
		if used > cutoff || (victim >= 0 && used >= oldest) {
			continue
		}
		if st := l.q.Stats(); st.InFlight > 0 || st.Waiting > 0 {
			continue
		}
		victim, oldest = i, used
	}
	if victim < 0 {
		return false
	}
	l := ls.ordered[victim]
	ls.ordered = append(ls.ordered[:victim], ls.ordered[victim+1:]...)
	key := laneKey{l.upstream, l.cred, l.model}
	delete(ls.byKey, key)
	if ls.creds[l.cred]--; ls.creds[l.cred] == 0 {
		delete(ls.creds, l.cred)
	}
	l.close(ls.set)
	if ls.kick != nil {
		// Give the lane's share back to the other Governors now, as a
		// shutdown does, rather than let its lease expire. The Coordinator
		// is called from the sync loop, never under ls.mu.
		ls.leaving = append(ls.leaving, l.id)
		select {
		case ls.kick <- struct{}{}:
		default:
		}
	}
	ls.evicted.Inc()
	ls.log.Info("lane evicted: idle, and the lane limit is reached", "lane", l.id,
		"idle", now.Sub(time.Unix(0, oldest)).Round(time.Second).String())
	return true
}

// close releases what a lane holds outside itself: its metric series. A
// call still holding the lane (none should: it is idle) keeps working.
func (l *lane) close(set *metrics.Set) {
	for _, name := range l.m.names {
		set.UnregisterMetric(name)
	}
}

// newLane requires ls.mu to be held.
func (ls *lanes) newLane(key laneKey) *lane {
	now := ls.cfg.Now()
	credHash := hex.EncodeToString(key.cred[:6])
	l := &lane{
		id:       fmt.Sprintf("%s/%s/%s", key.upstream.name, labelSafe(key.model), credHash),
		upstream: key.upstream,
		model:    key.model,
		cred:     key.cred,
		credHash: credHash,
		ctrl:     aimd.New(ls.cfg.AIMD, now),
	}
	l.q = queue.New(queue.Config{Capacity: ls.cfg.QueueCapacity, Limit: l.ctrl.Limit(), Now: ls.cfg.Now})
	l.pace.maxGap = ls.cfg.MaxPause
	if ls.kick != nil {
		l.co = &laneCoord{kick: ls.kick}
		defer l.co.signal() // join at once
		if ls.cfg.Coordinator.Up() {
			// Until the first sync tells this Governor its share, the
			// others may be using the whole shared limit: no call, for a
			// sync interval at most. (A failed sync gives the lane its
			// local limit at once.)
			l.co.starting, l.co.held = true, true
			l.q.SetLimit(1)
			l.q.PauseUntil(now.Add(ls.cfg.SyncInterval))
		}
	}
	l.m = newLaneMetrics(ls, l)
	ls.log.Info("lane created", "lane", l.id, "limit", l.ctrl.Limit(), "preset", ls.cfg.AIMD.Preset.String())
	return l
}

// takeLeaving returns the ids of the lanes evicted since the last call, for
// the sync loop to leave the Coordinator.
func (ls *lanes) takeLeaving() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ids := ls.leaving
	ls.leaving = nil
	return ids
}

// all returns the lanes in creation order.
func (ls *lanes) all() []*lane {
	ls.mu.RLock()
	defer ls.mu.RUnlock()
	return append([]*lane(nil), ls.ordered...)
}

// queued counts the calls waiting in every lane.
func (ls *lanes) queued() int {
	n := 0
	for _, l := range ls.all() {
		n += l.q.Len()
	}
	return n
}

// close closes every lane's queue: waiting calls get queue.ErrClosed.
func (ls *lanes) close() {
	for _, l := range ls.all() {
		l.q.Close()
	}
}

// aimdOutcome maps an attempt's outcome to the controller's vocabulary:
// only 429/529 and timeouts are congestion signals.
func aimdOutcome(o outcome) aimd.Outcome {
	switch o {
	case outcomeAnswered:
		return aimd.Success
	case outcomeRateLimited:
		return aimd.RateLimited
	case outcomeTimeout:
		return aimd.Timeout
	}
	return aimd.Failure
}

// observe feeds one attempt to the controller and applies the new limit.
// The attempt took latency, and its slot was granted at dispatched;
// inFlight counts the lane's calls in flight, this one included.
//
// A coordinated lane's controller holds the limit shared by every Governor
// on the lane, and its queue this Governor's share of it (see adopt).
func (l *lane) observe(o outcome, latency time.Duration, dispatched time.Time, inFlight int, now time.Time, log *slog.Logger) {
	l.lastUsed.Store(now.UnixNano())
	l.mu.Lock()
	before := l.ctrl.Limit()
	co := l.co
	shared := co != nil && co.joined
	if shared {
		inFlight = ctrlInFlight(inFlight, co.share, int(co.sharedTarget), before)
	}
	ev := l.ctrl.ObserveAt(aimd.Sample{Outcome: aimdOutcome(o), Latency: latency, InFlight: inFlight, Dispatched: dispatched}, now)
	limit := l.ctrl.Limit()
	qlimit := limit
	decreased := co != nil && (ev == aimd.Decreased || ev == aimd.Collapsed)
	if decreased {
		co.decDispatched, co.collapsed = dispatched, ev == aimd.Collapsed
	}
	if shared {
		if decreased {
			// Take the cut on the share at once; the sync it asks for
			// tells the others.
			co.share = max(1, (co.share*limit+before-1)/before)
		}
		qlimit = co.share
	}
	l.q.SetLimit(qlimit)
	l.mu.Unlock()
	if decreased || shared && ev == aimd.Increased {
		// A decrease is told at once; so is an increase, which gives
		// this Governor's share its part at once (see ctrlInFlight).
		co.signal()
	}

	switch ev {
	case aimd.Decreased:
		l.m.decreases.Inc()
		log.Info("lane limit decreased", "lane", l.id, "from", before, "to", limit, "cause", l.decreaseCause())
	case aimd.Collapsed:
		l.m.collapses.Inc()
		log.Info("lane collapsed", "lane", l.id, "from", before, "to", limit, "cause", l.ctrl.State().DecreaseCause.String())
	case aimd.Recovered:
		log.Info("lane recovered", "lane", l.id, "limit", limit)
	case aimd.Yielded:
		log.Debug("lane yielded", "lane", l.id, "from", before, "to", limit)
	}
}

// decreaseCause says what made the controller decrease: the signal itself,
// or for Phoenix, whose decreases happen when a feedback window ends (often
// on a success, so the outcome at hand says nothing), what the window held.
func (l *lane) decreaseCause() string {
	c := l.ctrl.State().DecreaseCause
	if l.ctrl.Config().Preset != aimd.Phoenix {
		return c.String()
	}
	if c == aimd.Timeout {
		return "window had timeouts"
	}
	return "window had rate limits"
}

// pause holds the lane's dispatches until t (the provider said Retry-After),
// or until a call of the lane succeeds (see answered), whichever is first.
func (l *lane) pause(t, now time.Time, log *slog.Logger) {
	l.mu.Lock()
	extended := t.After(l.pausedUntil)
	if extended {
		l.pausedUntil = t
	}
	co := l.co
	if co != nil && t.After(co.seenPause) {
		// Tell the other Governors at once.
		co.pendingPause, co.pendingAt, co.seenPause = t, now, t
	} else {
		co = nil
	}
	l.mu.Unlock()
	if co != nil {
		co.signal()
	}
	if extended {
		l.q.PauseUntil(t)
		l.m.pauses.Inc()
		log.Info("lane paused", "lane", l.id, "until", t.Format(time.RFC3339Nano))
	}
}

// answered lifts a pause when a call of the lane has just succeeded.
//
// A Retry-After says when the provider expects to take that call again;
// whether it speaks for the whole lane depends on the limit behind it. Under
// a request budget the lane should wait, and the pacer, which reads the
// budget headers, already makes it wait. Under a concurrency cap a call that
// completes frees a slot at once, and holding the lane for the rest of the
// hint (a whole second, typically) would leave that slot idle: the
// controller's decrease is the right answer to a cap. So a pause holds only
// while nothing succeeds; the call that was told to wait still waits out its
// own hint (see Proxy.backoff).
func (l *lane) answered(now time.Time, log *slog.Logger) {
	l.mu.Lock()
	lifted := l.pausedUntil.After(now)
	if lifted {
		l.pausedUntil = time.Time{}
	}
	if l.co != nil {
		l.co.lastOK = now
	}
	l.mu.Unlock()
	if lifted {
		l.q.Resume()
		log.Debug("lane resumed: a call succeeded", "lane", l.id)
	}
}

// LaneInfo is one lane as GET /governor/lanes shows it.
type LaneInfo struct {
	ID              string         `json:"id"`
	Upstream        string         `json:"upstream"`
	Model           string         `json:"model"`
	Credential      string         `json:"credential"` // a short hash, never the key
	Target          float64        `json:"target"`
	Limit           int            `json:"limit"`
	InFlight        int            `json:"in_flight"`
	Queued          int            `json:"queued"`
	QueuedByUrgency map[string]int `json:"queued_by_urgency"`
	LatencyEWMAMs   float64        `json:"latency_ewma_ms"`
	LastDecrease    *time.Time     `json:"last_decrease"`
	Collapsed       bool           `json:"collapsed"`
	Decreases       uint64         `json:"decreases"`
	Collapses       uint64         `json:"collapses"`
	PausedUntil     *time.Time     `json:"paused_until"`
	// Coordinated reports whether the lane is governed together with the
	// other Governors that use it (GOVERNOR_REDIS_URL, and Redis reachable).
	// Then Target is the lane's shared target, SharedLimit the calls every
	// Governor together may have in flight, and Limit this Governor's
	// share of them. Otherwise SharedLimit is Limit.
	Coordinated bool `json:"coordinated"`
	SharedLimit int  `json:"shared_limit"`
	// Members is the number of Governors sharing the lane at the last
	// sync (0 when not coordinated).
	Members int `json:"members"`
	// ConnLimited reports that the calls in flight to the lane's upstream,
	// UpstreamInFlight summed over its lanes, fill its UpstreamMaxConns
	// connections (Config.MaxConnsPerUpstream): the lane's calls wait for
	// a connection whatever its limit.
	ConnLimited      bool `json:"conn_limited"`
	UpstreamInFlight int  `json:"upstream_in_flight"`
	UpstreamMaxConns int  `json:"upstream_max_conns"`
}

// info describes the lane; upstreamInFlight counts the calls in flight to
// its upstream.
func (l *lane) info(now time.Time, upstreamInFlight int) LaneInfo {
	st := l.ctrl.State()
	qs := l.q.Stats()
	li := LaneInfo{
		ConnLimited:      l.upstream.connLimited(upstreamInFlight, qs.InFlight),
		UpstreamInFlight: upstreamInFlight,
		UpstreamMaxConns: l.upstream.maxConns,
		ID:               l.id,
		Upstream:         l.upstream.name,
		Model:            l.model,
		Credential:       l.credHash,
		Target:           st.Target,
		Limit:            qs.Limit, // the controller's, or this Governor's share of it
		SharedLimit:      st.Limit,
		InFlight:         qs.InFlight,
		Queued:           qs.Waiting,
		QueuedByUrgency:  map[string]int{},
		LatencyEWMAMs:    float64(st.LatencyEWMA) / float64(time.Millisecond),
		Collapsed:        st.Collapsed,
		Decreases:        st.Decreases,
		Collapses:        st.Collapses,
	}
	if l.co != nil {
		l.mu.Lock()
		li.Coordinated, li.Members = l.co.joined, l.co.members
		if !l.co.joined {
			li.Members = 0
		} else {
			// The shared limit as of the last sync: the controller's
			// own has grown or been cut since, and is shared at the next.
			li.SharedLimit = max(1, int(l.co.sharedTarget))
		}
		l.mu.Unlock()
	}
	for u, n := range qs.WaitingByUrgency {
		if n > 0 {
			li.QueuedByUrgency[fmt.Sprintf("u=%d", u)] = n
		}
	}
	if !st.LastDecrease.IsZero() {
		t := st.LastDecrease
		li.LastDecrease = &t
	}
	if qs.PausedUntil.After(now) {
		t := qs.PausedUntil
		li.PausedUntil = &t
	}
	return li
}

// laneMetrics are one lane's series, labelled by its id (bounded by
// Config.MaxLanes, and free of credentials).
type laneMetrics struct {
	attempts  [len(outcomeNames)]*metrics.Counter
	retries   [len(outcomeNames)]*metrics.Counter
	decreases *metrics.Counter
	collapses *metrics.Counter
	pauses    *metrics.Counter
	queueWait *metrics.PrometheusHistogram
	upstream  *metrics.PrometheusHistogram
	names     []string // every series of the lane, to unregister it
}

func newLaneMetrics(ls *lanes, l *lane) *laneMetrics {
	set := ls.set
	lbl := fmt.Sprintf("lane=%q", l.id)
	m := &laneMetrics{}
	name := func(format string, args ...any) string {
		n := fmt.Sprintf(format, args...)
		m.names = append(m.names, n)
		return n
	}
	m.decreases = set.NewCounter(name("governor_lane_decreases_total{%s}", lbl))
	m.collapses = set.NewCounter(name("governor_lane_collapses_total{%s}", lbl))
	m.pauses = set.NewCounter(name("governor_lane_pauses_total{%s}", lbl))
	m.queueWait = set.NewPrometheusHistogramExt(name("governor_queue_wait_seconds{%s}", lbl), latencyBuckets)
	m.upstream = set.NewPrometheusHistogramExt(name("governor_lane_upstream_latency_seconds{%s}", lbl), latencyBuckets)
	for i, o := range outcomeNames {
		m.attempts[i] = set.NewCounter(name("governor_attempts_total{%s,outcome=%q}", lbl, o))
		if outcome(i).retryable() {
			m.retries[i] = set.NewCounter(name("governor_retries_total{%s,reason=%q}", lbl, o))
		}
	}
	set.NewGauge(name("governor_lane_target{%s}", lbl), func() float64 { return l.ctrl.State().Target })
	// The limit this Governor applies: the controller's, or this
	// Governor's share of it when the lane is coordinated.
	set.NewGauge(name("governor_lane_limit{%s}", lbl), func() float64 { return float64(l.q.Stats().Limit) })
	set.NewGauge(name("governor_lane_in_flight{%s}", lbl), func() float64 { return float64(l.q.Stats().InFlight) })
	set.NewGauge(name("governor_lane_queued{%s}", lbl), func() float64 { return float64(l.q.Len()) })
	// 1 while the calls in flight to the lane's upstream fill its
	// connections (GOVERNOR_MAX_CONNS_PER_UPSTREAM) and the lane has
	// calls among them.
	set.NewGauge(name("governor_lane_conn_limited{%s}", lbl), func() float64 {
		if l.upstream.connLimited(ls.upstreamInFlight(l.upstream), l.q.Stats().InFlight) {
			return 1
		}
		return 0
	})
	return m
}
