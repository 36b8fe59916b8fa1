package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/coord"
	"github.com/llmgovernor/governor/proxy"
)

// The defaults `governor -h` shows (the envDefault tags) are the packages'
// own: a default changed in a package, or in a tag, and not in the other,
// fails here. A variable whose default is "0 = the package's default"
// resolves in the package and is not listed.
func TestEnvDefaultsAreThePackagesDefaults(t *testing.T) {
	p, err := loadConfig(nil)
	require.NoError(t, err)
	c := p.config
	for _, tc := range []struct {
		env       string
		got, want any
	}{
		{"GOVERNOR_MAX_BODY_BYTES", c.MaxBodyBytes, proxy.DefaultMaxBodyBytes},
		{"GOVERNOR_MAX_BUFFERED_BYTES", c.MaxBufferedBytes, int64(proxy.DefaultMaxBufferedBytes)},
		{"GOVERNOR_ATTEMPT_TIMEOUT", c.AttemptTimeout, proxy.DefaultAttemptTimeout},
		{"GOVERNOR_STREAM_IDLE_TIMEOUT", c.StreamIdleTimeout, proxy.DefaultStreamIdleTimeout},
		{"GOVERNOR_CONNECT_TIMEOUT", c.ConnectTimeout, proxy.DefaultConnectTimeout},
		{"GOVERNOR_MAX_CONCURRENCY", c.MaxConcurrency, proxy.DefaultMaxConcurrency},
		{"GOVERNOR_MAX_CONNS_PER_UPSTREAM", c.MaxConnsPerUp, proxy.DefaultMaxConnsPerUpstream},
		{"GOVERNOR_MAX_RETRIES", c.MaxRetries, proxy.DefaultMaxRetries},
		{"GOVERNOR_QUEUE_TIMEOUT", c.QueueTimeout, proxy.DefaultQueueTimeout},
		{"GOVERNOR_QUEUE_CAPACITY", c.QueueCapacity, proxy.DefaultQueueCapacity},
		{"GOVERNOR_MAX_PAUSE", c.MaxPause, proxy.DefaultMaxPause},
		{"GOVERNOR_BACKOFF_BASE", c.BackoffBase, proxy.DefaultBackoffBase},
		{"GOVERNOR_BACKOFF_MAX", c.BackoffMax, proxy.DefaultBackoffMax},
		{"GOVERNOR_MAX_LANES", c.MaxLanes, proxy.DefaultMaxLanes},
		{"GOVERNOR_MAX_TENANTS", c.MaxTenants, proxy.DefaultMaxTenants},
		{"GOVERNOR_BATCH_MAX_ITEMS", c.BatchMaxItems, batch.DefaultMaxItems},
		{"GOVERNOR_BATCH_MAX_JOBS", c.BatchMaxJobs, batch.DefaultMaxJobs},
		{"GOVERNOR_BATCH_MAX_RESPONSE_BYTES", c.BatchMaxResponse, batch.DefaultMaxResponseBytes},
		{"GOVERNOR_BATCH_TTL", c.BatchTTL, batch.DefaultTTL},
		{"GOVERNOR_BATCH_MAX_RESULT_BYTES", c.BatchMaxResultBytes, int64(batch.DefaultMaxResultBytes)},
		{"GOVERNOR_AIMD_WINDOW", c.AIMDWindow, aimd.DefaultWindow},
		{"GOVERNOR_AIMD_REPEAT_DECREASE_RATIO", c.AIMDRepeatDecreaseRatio, aimd.DefaultRepeatDecreaseRatio},
		{"GOVERNOR_AIMD_PROBE_HOLD", c.AIMDProbeHold, aimd.DefaultProbeHold},
		{"GOVERNOR_AIMD_COLLAPSE_WINDOW", c.AIMDCollapseWindow, aimd.DefaultCollapseWindow},
		{"GOVERNOR_AIMD_COLLAPSE_THRESHOLD", c.AIMDCollapseThreshold, aimd.DefaultCollapseThreshold},
		{"GOVERNOR_AIMD_LATENCY_ALPHA", c.AIMDLatencyAlpha, aimd.DefaultLatencyAlpha},
		{"GOVERNOR_REDIS_TIMEOUT", c.RedisTimeout, coord.DefaultTimeout},
		{"GOVERNOR_REDIS_SYNC_INTERVAL", c.RedisSyncInterval, coord.DefaultSyncInterval},
		{"GOVERNOR_REDIS_SYNC_INTERVAL", c.RedisSyncInterval, proxy.DefaultSyncInterval},
		{"GOVERNOR_REDIS_LEASE_TTL", c.RedisLeaseTTL, coord.DefaultLeaseTTL},
	} {
		assert.EqualValues(t, tc.want, tc.got, "%s: its envDefault and the package's default differ", tc.env)
	}
	assert.Equal(t, aimd.Default.String(), c.AIMDPreset, "GOVERNOR_AIMD_PRESET")
}

// A variable set to the empty string is read as unset: it takes its
// default, as a compose file's ${GOVERNOR_X} of an unset variable or a
// template's empty value expects.
func TestEmptyValueIsTheDefault(t *testing.T) {
	p, err := loadConfig([]string{"GOVERNOR_LISTEN=", "GOVERNOR_ADMIN_LISTEN=", "GOVERNOR_MAX_RETRIES=",
		"GOVERNOR_QUEUE_TIMEOUT=", "GOVERNOR_ACCESS_LOG=", "GOVERNOR_LOG_LEVEL=", "GOVERNOR_AIMD_PRESET="})
	require.NoError(t, err)
	def, err := loadConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", p.Listen)
	assert.Equal(t, ":9090", p.AdminListen)
	assert.Equal(t, def.config, p.config)
}
