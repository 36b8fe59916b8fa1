package lane

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
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

// A lane whose credential the provider refused on every answer makes room
// for a new credential at once, before any idle lane; a lane whose
// credential was taken even once, or with a call waiting or in flight, is
// not one.
func TestRefusedCredentialsAreEvictedFirst(t *testing.T) {
	clock := &fakeClock{now: t0}
	r := newTestRegistry(t, clock, 3)
	get := func(cred string) (*Lane, error) { return r.Get(key(cred, "m")) }
	real, err := get("sk-real")
	require.NoError(t, err)
	real.ObserveCredential(false)
	revoked, err := get("sk-revoked-then-fixed")
	require.NoError(t, err)
	revoked.ObserveCredential(true)
	revoked.ObserveCredential(false)
	junk, err := get("sk-junk")
	require.NoError(t, err)
	junk.ObserveCredential(true)
	junk.ObserveCredential(true)

	// Every lane is in recent use; the junk one makes room.
	l, err := get("sk-new")
	require.NoError(t, err, "a new credential gets the refused lane's place")
	assert.False(t, registered(r, key("sk-junk", "m"), junk))
	assert.True(t, registered(r, key("sk-real", "m"), real))
	assert.True(t, registered(r, key("sk-revoked-then-fixed", "m"), revoked))
	_, err = get("sk-new-2")
	assert.ErrorIs(t, err, ErrTooManyLanes, "no refused lane left, none idle")

	// A refused lane with a call in flight stays.
	l.ObserveCredential(true)
	require.True(t, l.q.TryAcquire(queue.Priority{}))
	_, err = get("sk-new-3")
	assert.ErrorIs(t, err, ErrTooManyLanes, "the refused lane is busy")
	l.q.ReleaseTenant("")
	_, err = get("sk-new-3")
	assert.NoError(t, err, "and goes once it is not")

	// Past the eviction bound, idle lanes go as before, least recently
	// used first, after any refused one.
	clock.Set(t0.Add(r.evictAfter + time.Second))
	_, err = r.Get(key("sk-real", "m")) // used again: the most recent
	require.NoError(t, err)
	_, err = get("sk-new-4")
	require.NoError(t, err)
	assert.False(t, registered(r, key("sk-revoked-then-fixed", "m"), revoked), "the least recently used idle lane")
	assert.True(t, registered(r, key("sk-real", "m"), real))
}
