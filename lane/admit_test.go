package lane

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// newStartingLane returns a new lane of a Registry on the real clock
// (run it in a synctest bubble), the Registry closed when t ends.
func newStartingLane(t *testing.T) *Lane {
	t.Helper()
	_, l := newStartingRegistry(t)
	return l
}

// newStartingRegistry is newStartingLane with its Registry.
func newStartingRegistry(t *testing.T) (*Registry, *Lane) {
	t.Helper()
	r, err := New(Config{AIMD: aimd.Config{Max: 64}, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	return r, l
}

// A new lane lets one call out, then one more once its calls have gone
// unrefused for an admission window, and one more each half window after
// that, up to Initial; a refusal on the way leaves it the calls the
// provider took. The timer runs in a synctest bubble: its
// clock moves only when every goroutine of the test is blocked.
func TestLaneStartIsPacedByAdmissions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newStartingLane(t)

		sent := map[int]time.Time{}
		out := 0
		dispatch := func() {
			for l.q.TryAcquire(queue.Priority{}) {
				sent[out] = time.Now()
				l.Reserve(t.Context(), time.Now())
				out++
			}
		}
		dispatch()
		require.Equal(t, 1, out, "one call first")
		time.Sleep(aimd.DefaultAdmissionWindow - time.Millisecond)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 1, out, "not before the window has passed")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 2, out, "one call in for a window: two")
		time.Sleep(aimd.DefaultAdmissionWindow/2 - time.Millisecond)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 2, out, "not before half a window has passed")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 3, out, "two in for half a window: three")

		// A cap of 2: the third call is refused at once.
		now := time.Now().Add(time.Millisecond)
		l.Observe(RateLimited, time.Millisecond, sent[2], now)
		l.q.ReleaseTenant("")
		out--
		assert.Equal(t, 2, l.ctrl.Limit(), "the provider took two")
		time.Sleep(time.Second)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 2, out, "and the start is over")
		for range out {
			l.q.ReleaseTenant("")
		}
	})
}

// A provider far away: the connection the first call needs takes 30 ms
// to open, and the call is sent only then. The start does not step while
// the connection opens, nor until the window and three openings have
// passed since it opened (a TLS handshake and the call's own round trip,
// in which its refusal would come back); a later step over connections
// already open waits its half window and two openings, and one whose call
// needs a new connection half a window and three openings after it opened.
func TestLaneStartWaitsForTheUpstreamsConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, l := newStartingRegistry(t)
		const open = 30 * time.Millisecond
		window := aimd.DefaultAdmissionWindow
		out := 0
		dispatch := func() {
			for l.q.TryAcquire(queue.Priority{}) {
				l.Reserve(t.Context(), time.Now())
				out++
			}
		}
		step := func(d time.Duration) {
			time.Sleep(d)
			synctest.Wait()
			dispatch()
		}

		done := r.Connecting("default")
		dispatch()
		require.Equal(t, 1, out, "one call first")
		step(open)
		assert.Equal(t, 1, out, "not while its connection opens")
		done(true)
		step(window + 3*open - time.Millisecond)
		assert.Equal(t, 1, out, "its refusal could still come")
		step(time.Millisecond)
		assert.Equal(t, 2, out, "a window and three openings after the connection opened")

		step(window/2 + 2*open - time.Millisecond)
		assert.Equal(t, 2, out, "a round trip over an open connection")
		step(time.Millisecond)
		assert.Equal(t, 3, out, "half a window and two openings after the step")

		// The third call needs a connection of its own.
		third := r.Connecting("default")
		step(open)
		assert.Equal(t, 3, out, "not while its connection opens")
		third(true)
		step(window/2 + 3*open - time.Millisecond)
		assert.Equal(t, 3, out, "its refusal could still come")
		step(time.Millisecond)
		assert.Equal(t, 4, out, "half a window and three openings after its connection opened")

		info := r.Info(time.Now())[0]
		assert.InDelta(t, 30.0, info.UpstreamConnectMs, 1e-9, "shown in /governor/lanes")

		failed := r.Connecting("default")
		step(10 * time.Second)
		assert.Equal(t, 4, out, "a connection that does not open holds the start")
		failed(false)
		step(maxOpeningLook)
		assert.Equal(t, 5, out, "its failure does not, for more than a look")
		assert.InDelta(t, 30.0, r.Info(time.Now())[0].UpstreamConnectMs, 1e-9, "a failed connection is no opening")
		for range out {
			l.q.ReleaseTenant("")
		}
	})
}

// A coordinated lane starts from what the Governors share: no ramp.
func TestCoordinatedLaneHasNoRamp(t *testing.T) {
	c := newCoordLane(t)
	_, ramping := c.l.ctrl.AdmitDue()
	assert.False(t, ramping)
	assert.False(t, c.l.ramping.Load())
}

// A provider far away refuses a call tens of milliseconds after it was
// sent: the lanes of its upstream created after a refusal wait twice the
// quickest refusal before each step of their start.
func TestAdmissionWindowFollowsTheUpstreamsRefusals(t *testing.T) {
	clock := &fakeClock{now: t0}
	r := newTestRegistry(t, clock, 16)
	first, err := r.Get(key("a", "m"))
	require.NoError(t, err)
	assert.Equal(t, aimd.DefaultAdmissionWindow, first.ctrl.Config().AdmissionWindow, "nothing known of the upstream")

	first.Observe(RateLimited, 45*time.Millisecond, ms(0), ms(45))
	first.Observe(RateLimited, 30*time.Millisecond, ms(20), ms(50))
	first.Observe(RateLimited, 80*time.Millisecond, ms(20), ms(100))
	second, err := r.Get(key("b", "m"))
	require.NoError(t, err)
	assert.Equal(t, 60*time.Millisecond, second.ctrl.Config().AdmissionWindow, "twice the quickest refusal")

	other, err := r.Get(Key{Upstream: "other", Model: "m"})
	require.NoError(t, err)
	assert.Equal(t, aimd.DefaultAdmissionWindow, other.ctrl.Config().AdmissionWindow, "another upstream")
}

func TestAdmissionWindow(t *testing.T) {
	for _, tc := range []struct{ configured, refusal, want time.Duration }{
		{0, 0, aimd.DefaultAdmissionWindow},
		{0, time.Millisecond, aimd.DefaultAdmissionWindow},
		{0, 100 * time.Millisecond, 200 * time.Millisecond},
		{0, 5 * time.Second, maxAdmissionWindow},
		{20 * time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond},
		{-1, time.Second, -1},
		{2 * time.Second, 5 * time.Second, 2 * time.Second},
	} {
		assert.Equal(t, tc.want, admissionWindow(tc.configured, tc.refusal), "%+v", tc)
	}
}

// A start window the lane's calls do not fill tests nothing: no timer is
// set until a call let out fills it.
func TestLaneStartWaitsForItsLimitInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newStartingLane(t)
		pending := func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.admit.pending }

		require.True(t, l.q.TryAcquire(queue.Priority{}))
		l.Reserve(t.Context(), time.Now())
		assert.True(t, pending(), "one call fills a limit of one")
		time.Sleep(aimd.DefaultAdmissionWindow)
		synctest.Wait()
		require.Equal(t, 2, l.ctrl.Limit())
		assert.False(t, pending(), "one call of two: nothing to test")

		require.True(t, l.q.TryAcquire(queue.Priority{}))
		l.Reserve(t.Context(), time.Now())
		assert.True(t, pending(), "two of two")
		time.Sleep(aimd.DefaultAdmissionWindow / 2)
		synctest.Wait()
		assert.Equal(t, 3, l.ctrl.Limit())
		l.q.ReleaseTenant("")
		l.q.ReleaseTenant("")
	})
}
