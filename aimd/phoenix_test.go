package aimd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type step struct {
	at     float64 // seconds after t0
	s      Sample
	target float64
	limit  int
	ev     Event
}

func runSteps(t *testing.T, c *Controller, steps []step) {
	t.Helper()
	for i, st := range steps {
		ev := c.ObserveAt(st.s, at(st.at))
		got := c.State()
		assert.Equal(t, st.ev, ev, "step %d: %v at %vs: event", i, st.s.Outcome, st.at)
		assert.InDelta(t, st.target, got.Target, 1e-9, "step %d: %v at %vs: target", i, st.s.Outcome, st.at)
		assert.Equal(t, st.limit, got.Limit, "step %d: %v at %vs: limit", i, st.s.Outcome, st.at)
	}
}

// Phoenix's rules, step by step with explicit instants (t0 = New). Window
// 5s, +0.5 / ×0.5, collapse on 2 429s within 15s unless noted.
func TestPhoenixSteps(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "window ends on the first sample at or after start+5s",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 4},
			steps: []step{
				{1, ok(1, 4), 4, 4, None},
				{4.999, ok(1, 4), 4, 4, None},   // just before the end
				{5, ok(1, 4), 4.5, 4, None},     // at the end: clean window, +0.5
				{9.999, ok(1, 4), 4.5, 4, None}, // next window started at 5s
				{10.001, ok(1, 4), 5, 5, Increased},
				{20, ok(1, 5), 5.5, 5, None}, // an idle gap is one window
			},
		},
		{
			name: "one 429 among successes halves the window",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{1, ok(1, 8), 8, 8, None},
				{2, ok(1, 8), 8, 8, None},
				{3, limited(0, 8), 8, 8, None},
				{4, ok(1, 8), 8, 8, None},
				{5, ok(1, 8), 4, 4, Decreased}, // the window had an error
				{10, ok(1, 4), 4.5, 4, None},   // the error list does not carry over
			},
		},
		{
			name: "the sample that closes a window counts in it",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{6, limited(0, 8), 4, 4, Decreased},
			},
		},
		{
			name: "timeouts decrease but never collapse",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{1, timedOut(1), 8, 8, None},
				{2, timedOut(1), 8, 8, None},
				{5, ok(1, 8), 4, 4, Decreased},
			},
		},
		{
			name: "two 429s within 15s collapse at once; the error list is never cleared",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{1, limited(0, 8), 8, 8, None},
				{3, limited(0, 8), 1, 1, Collapsed},
				{5, ok(1, 1), 0.5, 1, Decreased}, // the window still had errors: 1 × 0.5
				{10, ok(1, 1), 1, 1, Recovered},  // first clean window after the collapse
				{15, ok(1, 1), 1.5, 1, None},
				// 17 - 3 = 14s: the 429 at 3s is still in the list.
				{17, limited(0, 1), 1, 1, Collapsed},
			},
		},
		{
			name: "429s exactly 15s apart collapse, then the window halves",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{1, limited(0, 8), 8, 8, None},
				{16, limited(0, 8), 0.5, 1, Collapsed},
			},
		},
		{
			name: "429s 16s apart do not collapse",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 8},
			steps: []step{
				{1, limited(0, 8), 8, 8, None},
				{17, limited(0, 8), 4, 4, Decreased},
			},
		},
		{
			name: "the limit floors at 1 while the target sinks below",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 1.5},
			steps: []step{
				{5, timedOut(1), 0.75, 1, Decreased},
				{10, timedOut(1), 0.375, 1, Decreased},
				{15, ok(1, 1), 0.875, 1, None},
			},
		},
		{
			name: "the limit is clamped at Max while the target winds up",
			cfg:  Config{Preset: Phoenix, Max: 4},
			steps: []step{
				{5, ok(1, 4), 4.5, 4, None},
				{10, ok(1, 4), 5, 4, None},
				{15, ok(1, 4), 5.5, 4, None},
				{20, timedOut(1), 2.75, 2, Decreased},
			},
		},
		{
			name: "a failure is not recorded and does not end a window",
			cfg:  Config{Preset: Phoenix, Max: 10, Initial: 4},
			steps: []step{
				{6, failed(1), 4, 4, None},
				{7, ok(1, 4), 4.5, 4, None}, // the window ends here, clean
			},
		},
		{
			name: "constants come from Config",
			cfg: Config{Preset: Phoenix, Max: 10, Initial: 4, Window: secs(1), IncreaseStep: 1,
				DecreaseRatio: 0.25, CollapseWindow: secs(2), CollapseThreshold: 3},
			steps: []step{
				{1, ok(1, 4), 5, 5, Increased},
				{1.5, limited(0, 5), 5, 5, None},
				{2, limited(0, 5), 1.25, 1, Decreased},
				{2.5, limited(0, 1), 1, 1, Collapsed}, // third 429 within 2s
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runSteps(t, New(tc.cfg, t0), tc.steps)
		})
	}
}

func TestPhoenixCounters(t *testing.T) {
	c := New(Config{Preset: Phoenix, Max: 10, Initial: 8}, t0)
	c.ObserveAt(limited(0, 8), at(1))
	c.ObserveAt(limited(0, 8), at(2))
	c.ObserveAt(ok(1, 1), at(5))
	st := c.State()
	assert.True(t, st.Collapsed)
	assert.Equal(t, uint64(1), st.Collapses)
	assert.Equal(t, uint64(1), st.Decreases)
	assert.Equal(t, at(5), st.LastDecrease)
	assert.InDelta(t, 1.0, st.DecreaseLevel, 1e-9, "target before the window's decrease")
}

func TestPhoenixInitialDefaultsToMax(t *testing.T) {
	c := New(Config{Preset: Phoenix, Max: 64}, t0)
	assert.Equal(t, 64, c.Limit())
}

func TestLatencyEWMA(t *testing.T) {
	for _, p := range []Preset{Phoenix, Default} {
		t.Run(p.String(), func(t *testing.T) {
			c := New(Config{Preset: p, Max: 10, Initial: 4}, t0)
			require.Zero(t, c.State().LatencyEWMA, "no success yet")
			c.ObserveAt(ok(1, 4), at(1))
			assert.Equal(t, secs(1), c.State().LatencyEWMA, "the first success sets it")
			c.ObserveAt(ok(2, 4), at(2))
			assert.InDelta(t, 1.2, c.State().LatencyEWMA.Seconds(), 1e-9, "0.8*1 + 0.2*2")
			c.ObserveAt(limited(10, 4), at(3))
			c.ObserveAt(failed(10), at(3))
			c.ObserveAt(timedOut(10), at(3))
			assert.InDelta(t, 1.2, c.State().LatencyEWMA.Seconds(), 1e-9, "only successes count")
			c.ObserveAt(ok(3, 4), at(4))
			assert.InDelta(t, 1.56, c.State().LatencyEWMA.Seconds(), 1e-9, "0.8*1.2 + 0.2*3")
		})
	}
}

// Phoenix's preset ignores Sample.Held and Sample.Unsent: the same
// answers, held or not, take it through the same states.
func TestPhoenixIgnoresHeld(t *testing.T) {
	plain, held := New(Config{Preset: Phoenix, Max: 64}, t0), New(Config{Preset: Phoenix, Max: 64}, t0)
	for i := range 400 {
		s := ok(0.5, plain.Limit())
		if i%37 == 36 {
			s = limited(0.5, plain.Limit())
		}
		now := at(0.1 * float64(i))
		ev := plain.ObserveAt(s, now)
		s.Held, s.Unsent = true, s.InFlight/2
		require.Equal(t, ev, held.ObserveAt(s, now), "answer %d", i)
		require.Equal(t, plain.State(), held.State(), "answer %d", i)
	}
	assert.Greater(t, plain.State().Decreases, uint64(0), "the run saw decreases")
}
