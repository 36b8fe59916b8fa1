package lane

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
)

// newTestRegistry returns a Registry with no Coordinator on clock.
func newTestRegistry(t testing.TB, clock *fakeClock, maxLanes int) *Registry {
	t.Helper()
	r, err := New(Config{AIMD: aimd.Config{Max: 8}, MaxLanes: maxLanes, Now: clock.Now, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// key is the lane key of credential cred and model m on the default
// upstream.
func key(cred, m string) Key {
	return Key{Upstream: "default", Credential: sha256.Sum256([]byte(cred)), Model: m}
}

// registered reports whether l is the lane the Registry holds for k.
func registered(r *Registry, k Key, l *Lane) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byKey[k] == l
}

// A lane Get hands out at an instant is in use from that instant: a new
// credential's Get at the same instant, even one that runs as soon as the
// lane is found, cannot evict it, however long it was idle before.
func TestGetHandsOutNoLaneBeingEvicted(t *testing.T) {
	clock := &fakeClock{now: t0}
	r := newTestRegistry(t, clock, 1)
	ka := key("sk-a", "m")
	a, err := r.Get(ka)
	require.NoError(t, err)
	clock.Set(t0.Add(time.Hour))

	var newErr error
	r.afterRead = func() {
		r.afterRead = nil
		_, newErr = r.Get(key("sk-new", "m"))
	}
	got, err := r.Get(ka)
	require.NoError(t, err)
	assert.Same(t, a, got)
	assert.True(t, registered(r, ka, got), "the lane handed out is the Registry's")
	assert.ErrorIs(t, newErr, ErrTooManyLanes, "the only lane is in use: the new credential is refused")
}
