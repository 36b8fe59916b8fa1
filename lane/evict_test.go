package lane_test

import (
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/lane"
)

// A new credential past MaxLanes takes the place of a lane only once that
// lane has been unused for 2 minutes, or twice MaxPause or MaxBackoff if
// longer (so that no lane is evicted under a call about to retry): a
// second before, it is refused; a second after, the idle lane goes.
func TestIdleLaneIsEvictedOnlyAfterTheBound(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		maxPause, maxBackoff time.Duration
		bound                time.Duration
	}{
		{"defaults", 0, 0, 2 * time.Minute},
		{"short waits", 10 * time.Second, time.Second, 2 * time.Minute},
		{"a long MaxPause", 5 * time.Minute, 0, 10 * time.Minute},
		{"a long MaxBackoff", 0, 3 * time.Minute, 6 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			now := t0
			r, err := lane.New(lane.Config{AIMD: aimd.Config{Max: 8}, MaxLanes: 1, Metrics: metrics.NewSet(),
				MaxPause: tc.maxPause, MaxBackoff: tc.maxBackoff, Now: func() time.Time { return now }})
			require.NoError(t, err)
			defer r.Close()
			old, err := r.Get(lane.Key{Upstream: "default", Model: "m", Credential: [32]byte{1}})
			require.NoError(t, err)
			fresh := lane.Key{Upstream: "default", Model: "m", Credential: [32]byte{2}}

			now = t0.Add(tc.bound - time.Second)
			_, err = r.Get(fresh)
			assert.ErrorIs(t, err, lane.ErrTooManyLanes, "idle for %s of %s: kept", now.Sub(t0), tc.bound)
			require.Len(t, r.All(), 1)
			assert.Equal(t, old.ID(), r.All()[0].ID())

			now = t0.Add(tc.bound + time.Second)
			l, err := r.Get(fresh)
			require.NoError(t, err, "idle for %s of %s: evicted", now.Sub(t0), tc.bound)
			require.Len(t, r.All(), 1)
			assert.Equal(t, l.ID(), r.All()[0].ID())
		})
	}
}
