package lane

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// Config configures a Registry. The zero value of every field but AIMD.Max
// and Metrics is a documented default.
type Config struct {
	// AIMD configures every lane's controller. AIMD.Max is required.
	AIMD aimd.Config
	// QueueCapacity bounds the calls waiting in one lane (queue.ErrFull
	// beyond it). Default 10000.
	QueueCapacity int
	// MaxLanes bounds the lanes (and their metric series): see Registry.
	// Default 256.
	MaxLanes int
	// MaxTenants bounds the tenants whose shares of one lane are kept
	// apart (queue.Config.MaxTenants); the calls of further tenants count
	// as one. Default 100.
	MaxTenants int
	// MaxPause is the longest pause the caller imposes on a lane (a
	// provider's Retry-After, capped). It also bounds the pacer's wait for
	// one dispatch. Default 60s.
	MaxPause time.Duration
	// MaxConnsPerUpstream is the connections to one upstream, which bound
	// the calls in flight to it over all its lanes: a lane whose calls
	// wait for a connection shows ConnLimited. Default 1024.
	MaxConnsPerUpstream int
	// MaxBackoff is the longest wait between a call's attempts when the
	// provider gives no hint. With MaxPause it sets how long a lane must
	// be idle before it may be evicted (2 minutes, or twice the longer of
	// the two), so that no lane is evicted under a call about to retry.
	// Default 30s.
	MaxBackoff time.Duration
	// Coordinator, if set, shares every lane with the other Governors
	// that use it; the Registry then runs a sync loop until Close. Nil:
	// each lane is governed here alone, and nothing is started.
	Coordinator Coordinator
	// SyncInterval is how often lanes are synced with the Coordinator.
	// Default 50ms.
	SyncInterval time.Duration
	// LeaseTTL is the Coordinator's lease: a lane idle for a third of it
	// syncs once a third of it. Default 3s.
	LeaseTTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Metrics receives the lanes' metrics. Required; owned by the caller.
	Metrics *metrics.Set
	// Logger receives the lanes' operational logs. Default: discard.
	Logger *slog.Logger
}

// Defaults of the Config fields.
const (
	DefaultQueueCapacity = 10000
	DefaultMaxLanes      = 256
	DefaultMaxTenants    = queue.DefaultMaxTenants
	DefaultMaxPause      = 60 * time.Second
	DefaultMaxBackoff    = 30 * time.Second
	DefaultSyncInterval  = 50 * time.Millisecond
	DefaultLeaseTTL      = 3 * time.Second

	DefaultMaxConnsPerUpstream = 1024
)

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.Metrics == nil {
		return out, errors.New("lane: no metrics set")
	}
	if err := out.AIMD.Validate(); err != nil {
		return out, fmt.Errorf("lane: %w", err)
	}
	setDefault(&out.QueueCapacity, DefaultQueueCapacity)
	setDefault(&out.MaxLanes, DefaultMaxLanes)
	setDefault(&out.MaxTenants, DefaultMaxTenants)
	setDefault(&out.MaxPause, DefaultMaxPause)
	setDefault(&out.MaxBackoff, DefaultMaxBackoff)
	setDefault(&out.MaxConnsPerUpstream, DefaultMaxConnsPerUpstream)
	setDefault(&out.SyncInterval, DefaultSyncInterval)
	setDefault(&out.LeaseTTL, DefaultLeaseTTL)
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
