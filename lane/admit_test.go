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

// A new lane lets one call out, then twice as many each admission window
// its calls go unrefused, up to Initial; a refusal on the way leaves it
// the calls the provider took. The timer runs in a synctest bubble: its
// clock moves only when every goroutine of the test is blocked.
func TestLaneStartIsPacedByAdmissions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := New(Config{AIMD: aimd.Config{Max: 64}, Metrics: metrics.NewSet()})
		require.NoError(t, err)
		defer r.Close()
		l, err := r.Get(Key{Upstream: "default", Model: "m"})
		require.NoError(t, err)

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
		time.Sleep(aimd.DefaultAdmissionWindow)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 4, out, "two in: four")

		// A cap of 3: the fourth call is refused at once.
		now := time.Now().Add(time.Millisecond)
		l.Observe(RateLimited, time.Millisecond, sent[3], now)
		l.q.ReleaseTenant("")
		out--
		assert.Equal(t, 3, l.ctrl.Limit(), "the provider took three")
		time.Sleep(time.Second)
		synctest.Wait()
		dispatch()
		assert.Equal(t, 3, out, "and the start is over")
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
