package aimd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAdopt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		initial      float64
		ownDecrease  bool // the controller decreased at 10s before adopting
		target       float64
		lastDecrease time.Time
		level        float64
		wantTarget   float64
		wantLastDecr time.Time
		wantLevel    float64
	}{
		{name: "raise, no decrease", initial: 8, target: 12, wantTarget: 12},
		{name: "clamped to max", initial: 8, target: 1000, wantTarget: 64},
		{name: "clamped to 1", initial: 8, target: 0.2, wantTarget: 1},
		{name: "a newer decrease is taken", initial: 20, target: 9, lastDecrease: at(5), level: 10,
			wantTarget: 9, wantLastDecr: at(5), wantLevel: 10},
		{name: "an older decrease is not", initial: 20, ownDecrease: true, target: 30, lastDecrease: at(5), level: 10,
			wantTarget: 30, wantLastDecr: at(10), wantLevel: 20},
		{name: "a newer decrease replaces the own one", initial: 20, ownDecrease: true, target: 12, lastDecrease: at(11), level: 14,
			wantTarget: 12, wantLastDecr: at(11), wantLevel: 14},
	} {
		c := New(Config{AdmissionWindow: -1, Max: 64, Initial: tc.initial}, t0)
		if tc.ownDecrease {
			c.ObserveAt(limited(0.001, int(tc.initial)), at(10))
		}
		before := c.State()
		c.Adopt(tc.target, tc.lastDecrease, tc.level)
		st := c.State()
		assert.InDelta(t, tc.wantTarget, st.Target, 1e-9, tc.name)
		assert.Equal(t, tc.wantLastDecr, st.LastDecrease, tc.name)
		assert.InDelta(t, tc.wantLevel, st.DecreaseLevel, 1e-9, tc.name)
		assert.Equal(t, before.Decreases, st.Decreases, "%s: adopting counts no decrease", tc.name)
	}
}

// After adopting a decrease made elsewhere, answers of calls dispatched
// before it are explained by it, and the controller grows again from the
// adopted target with calls sent after it.
func TestAdoptedDecreaseExplainsOlderAnswers(t *testing.T) {
	c := New(Config{AdmissionWindow: -1, Max: 64, Initial: 20}, t0)
	c.Adopt(10, at(10), 20)
	assert.Equal(t, None, c.ObserveAt(limited(1, 10), at(10.5)), "dispatched at 9.5s, before the shared decrease")
	assert.Equal(t, 10, c.Limit())
	assert.Equal(t, Increased, c.ObserveAt(ok(0.1, 10), at(11)), "dispatched after it: slow start below the level")
	assert.Equal(t, 11, c.Limit())
	assert.Equal(t, Decreased, c.ObserveAt(limited(0.1, 11), at(12)), "a fresh 429 decreases")
}

func TestAdoptPhoenix(t *testing.T) {
	c := New(Config{Preset: Phoenix, Max: 16}, t0)
	c.Adopt(5, at(3), 16)
	st := c.State()
	assert.InDelta(t, 5, st.Target, 1e-9)
	assert.Equal(t, at(3), st.LastDecrease)
	assert.Equal(t, 5, c.Limit())
}
