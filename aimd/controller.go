package aimd

import (
	"sync"
	"time"
)

// State is a snapshot of a Controller, for metrics and tests.
type State struct {
	// Target is the controller's internal target. For Phoenix it is the
	// raw value, which may lie outside [1, Max] as in Phoenix; Limit is
	// the clamped integer. For Default it always lies in [1, Max].
	Target float64
	// Limit is the integer concurrency limit: max(1, floor(Target)),
	// at most Max.
	Limit int
	// LatencyEWMA is the moving average of successful calls' latency
	// (zero until the first success).
	LatencyEWMA time.Duration
	// LastDecrease is when the target was last decreased or collapsed
	// (zero if never).
	LastDecrease time.Time
	// DecreaseLevel is, for Default, the level at which the last
	// decrease's congestion signal arrived (the pre-storm level after a
	// collapse), or zero if none or once the lane has succeeded at that
	// level again. For Phoenix it is the target just before the last
	// decrease or collapse.
	DecreaseLevel float64
	// DecreaseCause is the congestion signal behind the last decrease or
	// collapse: RateLimited or Timeout, or Success for a Default lane
	// whose calls succeeded but slowed down as its limit rose (see
	// Config.LatencyTolerance). It is Success too before any decrease
	// (LastDecrease is then zero). For Phoenix,
	// whose decreases happen when a window ends (often on a success), it
	// says what the window held: Timeout if only timeouts, else
	// RateLimited.
	DecreaseCause Outcome
	// Collapsed reports whether the controller is in the collapsed state.
	Collapsed bool
	// Decreases and Collapses count decreases and collapses since New.
	Decreases, Collapses uint64
	// Yields counts the Default preset's yields since New.
	Yields uint64
}

// A Controller computes the concurrency limit of one lane from the
// outcomes of its calls. It starts no goroutines: its state advances only
// when a sample is observed, at the time passed in.
//
// A Controller is safe for concurrent use by multiple goroutines. Create
// one with New; the zero value is not usable.
type Controller struct {
	mu  sync.Mutex
	cfg Config // with defaults applied

	target      float64
	latency     float64 // EWMA, seconds; valid if hasLatency
	hasLatency  bool
	lastDecr    time.Time
	decrLevel   float64
	decrCause   Outcome
	collapsed   bool
	decreases   uint64
	collapses   uint64
	yields      uint64
	phoenix     phoenixState
	defaultRule defaultState
}

// New returns a Controller for cfg, starting at now (Phoenix's first
// feedback window starts at now).
//
// New panics if cfg.Validate reports an error: a Config built from outside
// input should be validated first.
func New(cfg Config, now time.Time) *Controller {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	cfg = cfg.withDefaults()
	c := &Controller{cfg: cfg, target: cfg.Initial}
	switch cfg.Preset {
	case Phoenix:
		c.phoenix.init(cfg, now)
	default:
		c.defaultRule.init(cfg, now)
		if c.defaultRule.ramp.on {
			c.target = 1
		}
		if c.latencyOn() {
			c.recordLimitLocked(now)
			c.startLedgerLocked(now)
		}
	}
	return c
}

// Config returns the controller's configuration with defaults applied.
func (c *Controller) Config() Config { return c.cfg }

// Observe is shorthand for ObserveAt(s, time.Now()).
func (c *Controller) Observe(s Sample) Event { return c.ObserveAt(s, time.Now()) }

// ObserveAt feeds the outcome of one attempt, answered at now, to the
// controller and returns the event it caused, if any.
func (c *Controller) ObserveAt(s Sample, now time.Time) Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.limitLocked()
	var ev Event
	if c.cfg.Preset == Phoenix {
		ev = c.observePhoenixLocked(s, now)
	} else {
		ev = c.observeDefaultLocked(s, now)
	}
	if ev == None && c.limitLocked() > before {
		ev = Increased
	}
	if c.cfg.Preset == Default && c.target > c.cfg.Initial {
		c.defaultRule.ramp.on = false
	}
	if c.cfg.Preset == Default && c.latencyOn() {
		c.recordLimitLocked(now)
		c.recordDispatchLocked(s, before, now)
	}
	return ev
}

// Limit returns the integer concurrency limit: max(1, floor(target)), at
// most Max. It changes only in ObserveAt, AdmitAt and Adopt, never with
// time alone.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limitLocked()
}

// State returns a snapshot of the controller's state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ewma time.Duration
	if c.hasLatency {
		ewma = time.Duration(c.latency * float64(time.Second))
	}
	return State{
		Target:        c.target,
		Limit:         c.limitLocked(),
		LatencyEWMA:   ewma,
		LastDecrease:  c.lastDecr,
		DecreaseLevel: c.decrLevel,
		DecreaseCause: c.decrCause,
		Collapsed:     c.collapsed,
		Decreases:     c.decreases,
		Collapses:     c.collapses,
		Yields:        c.yields,
	}
}

// limitLocked is Phoenix's target_concurrency property:
// min(max(1, int(target)), max). It requires c.mu to be held.
func (c *Controller) limitLocked() int {
	t := c.target
	if t >= float64(c.cfg.Max) { // also guards int() against huge values
		return c.cfg.Max
	}
	if t < 1 {
		return 1
	}
	return int(t) // truncation, as Python's int() for positive values
}

// observeLatencyLocked updates the latency EWMA with a success's latency,
// as Phoenix's record_success: the first sample sets it, later ones move
// it by alpha. It requires c.mu to be held.
func (c *Controller) observeLatencyLocked(d time.Duration) {
	x := d.Seconds()
	if !c.hasLatency {
		c.latency, c.hasLatency = x, true
		return
	}
	a := c.cfg.LatencyAlpha
	c.latency = (1-a)*c.latency + a*x
}
