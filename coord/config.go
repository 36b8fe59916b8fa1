package coord

import (
	"errors"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
)

// Config configures a Coordinator. The zero value of every field but
// Options and Metrics is a documented default.
type Config struct {
	// Options are the Redis client's options, typically from
	// redis.ParseURL. Required. Their timeouts and retries are replaced by
	// Timeout and no retries: a slow Redis must not slow calls.
	Options *redis.Options
	// Instance names this Governor among the others (its lease). Default:
	// hostname-pid-random.
	Instance string
	// Timeout bounds every Redis command; a command that takes longer
	// switches the Coordinator to local mode. Default 50ms.
	Timeout time.Duration
	// SyncInterval is how often the caller syncs its lanes; it sets how
	// often a Coordinator in local mode pings Redis, and is sent with
	// every sync: the shared record waits that long for the other
	// Governors to take up a change before it reads their silence as an
	// answer. Default 50ms.
	SyncInterval time.Duration
	// LeaseTTL is how long a lane's lease lasts without a sync: a Governor
	// that dies gives its share back after it. Default 3s.
	LeaseTTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Metrics receives the coordinator's metrics. Required; owned by the caller.
	Metrics *metrics.Set
	// Logger receives the transitions between shared and local mode.
	// Default: discard.
	Logger *slog.Logger
	// InstanceName is what the logs call the setting of Instance, in the
	// warning that two Governors share one. Default "Config.Instance"; a
	// program configured otherwise (an environment variable) gives the
	// name its users set.
	InstanceName string
	// LocalWhenRefused starts the Coordinator in local mode, as for a
	// Redis that is down, when Redis refuses the credentials or the
	// database number of Options; New then fails with no *StartError,
	// and the Coordinator joins once Redis accepts them.
	LocalWhenRefused bool
}

// Defaults of the Config fields.
const (
	DefaultTimeout      = 50 * time.Millisecond
	DefaultSyncInterval = 50 * time.Millisecond
	DefaultLeaseTTL     = 3 * time.Second
)

// Validate reports what is wrong with c, or nil. Zero values are valid.
func (c Config) Validate() error {
	var errs []error
	if c.Options == nil {
		errs = append(errs, errors.New("coord: no redis options"))
	}
	if c.Metrics == nil {
		errs = append(errs, errors.New("coord: no metrics set"))
	}
	if c.Timeout < 0 || c.SyncInterval < 0 || c.LeaseTTL < 0 {
		errs = append(errs, errors.New("coord: durations must not be negative"))
	}
	if c.LeaseTTL > 0 && c.SyncInterval > 0 && c.LeaseTTL < 2*c.SyncInterval {
		errs = append(errs, errors.New("coord: the lease must last at least two sync intervals"))
	}
	return errors.Join(errs...)
}
