package lane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// Key identifies a lane: one upstream, one credential, one model.
type Key struct {
	// Upstream names the upstream; it appears in the lane's id.
	Upstream string
	// Credential is the full hash of the credential the calls are billed
	// to, so that two credentials whose short hashes collide still get
	// separate lanes. The lane shows its first 6 bytes, in hex.
	Credential [sha256.Size]byte
	// Model is the model asked for; empty for none.
	Model string
}

// ErrTooManyLanes refuses a call whose credential would need a lane beyond
// the bound (see Registry).
var ErrTooManyLanes = errors.New("lane: the lane limit is reached and no lane has been idle long enough to make room for a new credential")

// OtherModel is the Model of a credential's lane that groups its new
// models once MaxLanes lanes exist.
const OtherModel = "other"

// minEvictAfter is the least time a lane must have been unused, with
// nothing waiting or in flight, before a new lane may evict it. The bound
// (Registry.evictAfter) is also at least twice the longest wait between a
// call's attempts (MaxPause, MaxBackoff), so that a lane is not evicted
// under a call about to retry.
const minEvictAfter = 2 * time.Minute

// A Registry holds every lane, created on first use. It is safe for
// concurrent use.
//
// Lanes are bounded, because request headers and bodies choose them. Once
// MaxLanes exist, a new model of a known credential shares that
// credential's "other" lane (isolation is per credential, so that costs
// nothing but per-model accounting). A new credential, or a known one's
// first "other" lane, evicts a lane whose credential the provider refused
// on every answer, else the least recently used lane unused for 2 minutes,
// or twice MaxPause or MaxBackoff if longer; with none, a new credential is refused (ErrTooManyLanes),
// which keeps every credential's calls apart from every other's while
// bounding the lanes at 2×MaxLanes.
type Registry struct {
	cfg        Config
	evicted    *metrics.Counter
	evictAfter time.Duration // unused this long, an idle lane may be evicted
	// afterRead, if set (by tests), runs in Get once the read lock is
	// released.
	afterRead func()

	// kick asks the sync loop for a sync now; nil without a Coordinator.
	kick chan struct{}
	// ctx ends when the Registry closes; syncDone is closed when the sync
	// loop has ended (nil without a Coordinator).
	ctx      context.Context
	cancel   context.CancelFunc
	syncDone chan struct{}

	mu      sync.RWMutex
	byKey   map[Key]*Lane
	ids     map[string]bool           // the ids of the lanes in byKey
	ordered []*Lane                   // in creation order, for All
	creds   map[[sha256.Size]byte]int // lanes per credential
	loads   map[string]*connLoad      // by upstream name
	// leaving are the ids of evicted lanes whose shares the sync loop is
	// to give back to the Coordinator (see takeLeaving); nil without one.
	leaving []string
}

// New returns a Registry for cfg. It registers its metrics on cfg.Metrics
// and, with a Coordinator, starts the sync loop that Close stops.
func New(cfg Config) (*Registry, error) {
	r, err := newRegistry(cfg)
	if err != nil {
		return nil, err
	}
	if r.cfg.Coordinator != nil {
		r.syncDone = make(chan struct{})
		go r.syncLoop()
	}
	return r, nil
}

// newRegistry returns a Registry for cfg with no sync loop (New starts it).
func newRegistry(cfg Config) (*Registry, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Registry{cfg: c, byKey: map[Key]*Lane{}, ids: map[string]bool{},
		creds:      map[[sha256.Size]byte]int{},
		loads:      map[string]*connLoad{},
		evictAfter: max(minEvictAfter, 2*c.MaxPause, 2*c.MaxBackoff),
		evicted:    c.Metrics.NewCounter("governor_lanes_evicted_total")}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if c.Coordinator != nil {
		r.kick = make(chan struct{}, 1)
	}
	c.Metrics.RegisterMetricsWriter(r.writeBudgets)
	return r, nil
}

// Get returns the lane of key, creating it on first use, or
// ErrTooManyLanes. Once MaxLanes lanes exist, a new model gets its
// credential's OtherModel lane. A model name longer than 256 bytes is
// kept as its first bytes, "~" and a hash of the whole name.
func (r *Registry) Get(key Key) (*Lane, error) {
	key.Model = boundModel(key.Model)
	now := r.cfg.Now()
	r.mu.RLock()
	l := r.byKey[key]
	if l != nil {
		// Under the lock, which eviction takes for writing: a lane is
		// in use from the instant it is handed out.
		l.lastUsed.Store(now.UnixNano())
	}
	r.mu.RUnlock()
	if r.afterRead != nil {
		r.afterRead()
	}
	if l != nil {
		if l.co != nil && l.co.parked.CompareAndSwap(true, false) {
			l.co.signal() // a parked lane syncs before its first call
		}
		return l, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l = r.byKey[key]; l == nil && len(r.byKey) >= r.cfg.MaxLanes {
		// Bound the lanes (and metric series) that request bodies can
		// create: new models share one lane per upstream and credential.
		key.Model = OtherModel
		l = r.byKey[key]
		if l == nil && !r.evictLocked(now) && r.creds[key.Credential] == 0 {
			return nil, ErrTooManyLanes
		}
	}
	if l == nil {
		l = r.newLaneLocked(key)
		// A lane evicted and back before its share was given back keeps
		// its place in the Coordinator.
		r.leaving = slices.DeleteFunc(r.leaving, func(id string) bool { return id == l.id })
		r.byKey[key] = l
		r.ids[l.id] = true
		r.ordered = append(r.ordered, l)
		r.creds[key.Credential]++
	}
	l.lastUsed.Store(now.UnixNano())
	return l, nil
}

// evictLocked removes a lane that has nothing waiting or in flight, with
// its metric series, and reports whether it removed one: the least
// recently used of the lanes whose credential the provider has refused on
// every answer (401 or 403: see ObserveCredential), however recently used,
// else the least recently used of those unused for r.evictAfter. So
// made-up credentials cannot keep real ones out: their lanes make room at
// once. It requires r.mu to be held for writing.
func (r *Registry) evictLocked(now time.Time) bool {
	victim, victimRefused := -1, false
	var oldest int64
	cutoff := now.Add(-r.evictAfter).UnixNano()
	for i, l := range r.ordered {
		used, junk := l.lastUsed.Load(), l.refused()
		switch {
		case victimRefused && !junk, used > cutoff && !junk:
			continue
		case victim >= 0 && junk == victimRefused && used >= oldest:
			continue
		}
		if st := l.q.Stats(); st.InFlight > 0 || st.Waiting > 0 {
			continue
		}
		victim, victimRefused, oldest = i, junk, used
	}
	if victim < 0 {
		return false
	}
	l := r.ordered[victim]
	r.ordered = append(r.ordered[:victim], r.ordered[victim+1:]...)
	delete(r.byKey, l.key)
	delete(r.ids, l.id)
	if r.creds[l.key.Credential]--; r.creds[l.key.Credential] == 0 {
		delete(r.creds, l.key.Credential)
	}
	l.close(r.cfg.Metrics)
	if r.kick != nil {
		// Give the lane's share back to the other Governors now, as a
		// shutdown does, rather than let its lease expire. The Coordinator
		// is called from the sync loop, never under r.mu.
		r.leaving = append(r.leaving, l.id)
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	r.evicted.Inc()
	why := "idle"
	if victimRefused {
		why = "credential refused"
	}
	r.cfg.Logger.Info("lane evicted: the lane limit is reached", "lane", l.id, "cause", why,
		"idle", now.Sub(time.Unix(0, oldest)).Round(time.Second).String())
	return true
}

// newLaneLocked requires r.mu to be held.
func (r *Registry) newLaneLocked(key Key) *Lane {
	now := r.cfg.Now()
	credHash := hex.EncodeToString(key.Credential[:6])
	cfg := r.cfg.AIMD
	load := r.loadLocked(key.Upstream)
	cfg.AdmissionWindow = admissionWindow(cfg.AdmissionWindow, time.Duration(load.refusal.Load()))
	if r.kick != nil {
		// A coordinated lane's limit is shared, and its start is the
		// Coordinator's: no admission ramp of its own.
		cfg.AdmissionWindow = -1
	}
	l := &Lane{
		id:       r.newIDLocked(key, credHash),
		key:      key,
		credHash: credHash,
		ctrl:     aimd.New(cfg, now),
		now:      r.cfg.Now,
		log:      r.cfg.Logger,
		load:     load,
	}
	l.events = eventLog{log: r.cfg.Logger, lane: l.id}
	l.q = queue.New(queue.Config{Capacity: r.cfg.QueueCapacity, MaxTenants: r.cfg.MaxTenants, Limit: l.ctrl.Limit(), Now: r.cfg.Now})
	l.pace.maxGap = r.cfg.MaxPause
	if r.kick != nil {
		l.co = &laneCoord{kick: r.kick, coord: r.cfg.Coordinator}
		h := fnv.New32a()
		_, _ = h.Write([]byte(l.id))
		l.co.parkEvery = parkedSync(r.cfg.LeaseTTL) * time.Duration(512+h.Sum32()%512) / 1024
		defer l.co.signal() // join at once
		if r.cfg.Coordinator.Up() {
			// Until the first sync tells this Governor its share, the
			// others may be using the whole shared limit: no call, for a
			// sync interval at most. (A failed sync gives the lane its
			// local limit at once.)
			l.co.starting, l.co.held = true, true
			l.q.SetLimit(1)
			l.q.PauseUntil(now.Add(r.cfg.SyncInterval))
		}
	}
	l.m = newLaneMetrics(r, l)
	_, ramping := l.ctrl.AdmitDue()
	l.ramping.Store(ramping)
	r.cfg.Logger.Info("lane created", "lane", l.id, "limit", l.ctrl.Limit(), "preset", r.cfg.AIMD.Preset.String())
	return l
}

// newIDLocked returns the id of a new lane of key: upstream/model/credential
// hash, unique among the lanes held. The id is a function of the key, the
// same whatever order lanes are made in (after a restart too, so a lane's
// metric series keep their name): a model's label is its name or keeps a
// hash of it (see labelSafe), so distinct models get distinct labels. Only
// two credentials whose 6-byte hashes coincide share that form; the later
// lane then gets "~2", "~3", … at the end, since an id names the lane's
// metric series, which must not be registered twice. It requires r.mu to
// be held for writing.
func (r *Registry) newIDLocked(key Key, credHash string) string {
	base := fmt.Sprintf("%s/%s/%s", key.Upstream, labelSafe(key.Model), credHash)
	id := base
	for n := 2; r.ids[id]; n++ {
		id = fmt.Sprintf("%s~%d", base, n)
	}
	return id
}

// maxModel is the longest model name a lane keeps (see boundModel).
const maxModel = 256

// boundModel returns m if it is at most maxModel bytes, else its first
// bytes, "~" and a hash of the whole name, maxModel bytes in all (a new
// string: the lane does not hold on to m). So the names a lane keeps and
// shows are bounded, however long the names request bodies carry, and
// long names still get lanes of their own.
func boundModel(m string) string {
	if len(m) <= maxModel {
		return m
	}
	sum := sha256.Sum256([]byte(m))
	tag := "~" + hex.EncodeToString(sum[:16])
	return m[:maxModel-len(tag)] + tag
}

// noModel is the model label of a lane whose calls name no model.
const noModel = "none"

// maxLabel is the longest model label in a lane id.
const maxLabel = 64

// labelSafe maps a model name to a label that is safe in a lane id and a
// metric label, at most maxLabel bytes: noModel for none; the name itself
// if it is that short, made of letters, digits and "._:-@/" only, and not
// noModel; else as much of it as fits, other bytes replaced by "_", then
// "~" and a hash of the whole name, so that names that differ only past
// the prefix, or only in the bytes replaced, still get labels of their
// own. Distinct names thus get distinct labels (short of a hash
// collision).
func labelSafe(s string) string {
	if s == "" {
		return noModel
	}
	if len(s) <= maxLabel && s != noModel && strings.IndexFunc(s, func(c rune) bool { return !labelByte(c) }) < 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	tag := "~" + hex.EncodeToString(sum[:5])
	b := []byte(s[:min(len(s), maxLabel-len(tag))])
	for i, c := range b {
		if !labelByte(rune(c)) {
			b[i] = '_'
		}
	}
	return string(b) + tag
}

// labelByte reports whether c may appear in a lane id's model label as is.
func labelByte(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-@/", c)
}

// takeLeaving returns the ids of the lanes evicted since the last call, for
// the sync loop to leave the Coordinator.
func (r *Registry) takeLeaving() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.leaving
	r.leaving = nil
	return ids
}

// All returns the lanes in creation order.
func (r *Registry) All() []*Lane {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*Lane(nil), r.ordered...)
}

// Info returns every lane as GET /governor/lanes shows it, in creation
// order.
func (r *Registry) Info(now time.Time) []Info {
	all := r.All()
	out := make([]Info, 0, len(all))
	sums := inFlightByUpstream(all)
	for _, l := range all {
		out = append(out, r.info(l, now, sums[l.key.Upstream]))
	}
	return out
}

// Coordinated reports whether the registry shares its lanes through a
// Coordinator (on), and whether that coordination works now (up).
func (r *Registry) Coordinated() (on, up bool) {
	if r.cfg.Coordinator == nil {
		return false, false
	}
	return true, r.cfg.Coordinator.Up()
}

// CoordinationCause says why the registry's coordination is off (see
// Coordinator.Cause); empty while it is on, or without a Coordinator.
func (r *Registry) CoordinationCause() string {
	if r.cfg.Coordinator == nil {
		return ""
	}
	return r.cfg.Coordinator.Cause()
}

// Queued counts the calls waiting in every lane.
func (r *Registry) Queued() int {
	n := 0
	for _, l := range r.All() {
		n += l.q.Len()
	}
	return n
}

// Close stops the sync loop, if any, giving every lane's share back to the
// Coordinator, then closes every lane's queue: waiting calls get
// queue.ErrClosed. Calls holding a slot may still release it.
func (r *Registry) Close() {
	r.cancel()
	if r.syncDone != nil {
		<-r.syncDone
	}
	for _, l := range r.All() {
		l.stopAdmit()
		l.q.Close()
	}
}
