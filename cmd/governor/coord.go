package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"

	"github.com/llmgovernor/governor/coord"
	"github.com/llmgovernor/governor/lane"
)

// startCoordination connects to Redis when GOVERNOR_REDIS_URL is set and
// returns the lanes' Coordinator and its Close; nil, nil without one.
// Redis need not be up: the Coordinator starts in local mode and joins when
// it answers. A Redis that answers and refuses the URL's credentials or
// database is an error (the configuration is wrong, and no wait fixes
// it), unless GOVERNOR_REDIS_AUTH_FAILURE=local.
func startCoordination(cfg *parsed, set *metrics.Set, log *slog.Logger) (lane.Coordinator, func(), error) {
	if cfg.redis == nil {
		return nil, nil, nil
	}
	// go-redis logs through a package-wide logger (to stderr by default):
	// its messages go to ours, at debug level, where they do not repeat
	// the coordinator's own "redis coordination lost".
	redis.SetLogger(redisLogger{log.With("component", "redis")})
	co, err := coord.New(coord.Config{
		Options:      cfg.redis,
		Instance:     cfg.Instance,
		InstanceName: variable("Instance"),
		Timeout:      cfg.RedisTimeout,
		SyncInterval: cfg.RedisSyncInterval,
		LeaseTTL:     cfg.RedisLeaseTTL,
		Metrics:      set,
		Logger:       log,

		LocalWhenRefused: cfg.RedisAuthFailure == "local",
	})
	var refused *coord.StartError
	if errors.As(err, &refused) {
		return nil, nil, fmt.Errorf("GOVERNOR_REDIS_URL: %w", err)
	}
	if err != nil {
		// The configuration was validated: this is a programmer error.
		panic(err)
	}
	return coordinator{co}, func() { _ = co.Close() }, nil
}

// coordinator adapts *coord.Coordinator to lane.Coordinator: the two
// packages know nothing of each other, and their report and state types
// are the same structs, converted field for field.
type coordinator struct{ c *coord.Coordinator }

func (a coordinator) Sync(ctx context.Context, reports []lane.Report) ([]lane.Shared, error) {
	in := make([]coord.Report, len(reports))
	for i, r := range reports {
		in[i] = coord.Report(r)
	}
	out, err := a.c.Sync(ctx, in)
	if err != nil {
		return nil, err
	}
	shared := make([]lane.Shared, len(out))
	for i, s := range out {
		shared[i] = lane.Shared(s)
	}
	return shared, nil
}

func (a coordinator) Reserve(ctx context.Context, id string, rate, burst float64) (time.Duration, error) {
	return a.c.Reserve(ctx, id, rate, burst)
}

func (a coordinator) Up() bool { return a.c.Up() }

func (a coordinator) Cause() string { return string(a.c.Cause()) }

func (a coordinator) Leave(ctx context.Context, lanes []string) error { return a.c.Leave(ctx, lanes) }

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.Debug(fmt.Sprintf(format, v...))
}
