package aimd

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePreset(t *testing.T) {
	for in, want := range map[string]Preset{"": Default, "default": Default, " Phoenix ": Phoenix, "PHOENIX": Phoenix} {
		got, err := ParsePreset(in)
		require.NoError(t, err, "input %q", in)
		assert.Equal(t, want, got, "input %q", in)
	}
	_, err := ParsePreset("cubic")
	assert.ErrorContains(t, err, `unknown preset "cubic"`)
	for _, p := range []Preset{Default, Phoenix} {
		got, err := ParsePreset(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, got, "round trip of %v", p)
	}
}

func TestStrings(t *testing.T) {
	assert.Equal(t, "rate_limited", RateLimited.String())
	assert.Equal(t, "outcome(9)", Outcome(9).String())
	assert.Equal(t, "collapsed", Collapsed.String())
	assert.Equal(t, "event(9)", Event(9).String())
	assert.Equal(t, "preset(9)", Preset(9).String())
}

func TestValidate(t *testing.T) {
	assert.NoError(t, Config{Max: 1}.Validate(), "zero values are defaults")
	assert.NoError(t, Config{Preset: Phoenix, Max: 64, Initial: 64, DecreaseRatio: 0.5, LatencyAlpha: 1}.Validate())
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{}, "max concurrency 0 must be at least 1"},
		{Config{Max: 4, Preset: 7}, "unknown preset 7"},
		{Config{Max: 4, Initial: 5}, "initial target 5 must be between 0 (preset default) and max 4"},
		{Config{Max: 4, Initial: -1}, "initial target -1"},
		{Config{Max: 4, Initial: math.NaN()}, "initial target NaN"},
		{Config{Max: 4, Window: -time.Second}, "window -1s must not be negative"},
		{Config{Max: 4, IncreaseStep: -0.5}, "increase step -0.5"},
		{Config{Max: 4, DecreaseRatio: 1}, "decrease ratio 1 must be in (0, 1)"},
		{Config{Max: 4, RepeatDecreaseRatio: 1.5}, "repeat decrease ratio 1.5"},
		{Config{Max: 4, ProbeHold: -1}, "probe hold -1"},
		{Config{Max: 4, CollapseWindow: -1}, "collapse window -1ns"},
		{Config{Max: 4, CollapseThreshold: -2}, "collapse threshold -2"},
		{Config{Max: 4, LatencyAlpha: 1.2}, "latency alpha 1.2"},
		{Config{Max: 4, LatencyAlpha: math.Inf(1)}, "latency alpha +Inf"},
		{Config{Max: 4, LatencyTolerance: 1}, "latency tolerance 1 must be above 1"},
		{Config{Max: 4, LatencyTolerance: math.NaN()}, "latency tolerance NaN"},
	}
	for _, tc := range cases {
		assert.ErrorContains(t, tc.cfg.Validate(), tc.want, "config %+v", tc.cfg)
	}
	err := Config{Max: 0, DecreaseRatio: 2}.Validate()
	assert.ErrorContains(t, err, "max concurrency", "every problem is reported")
	assert.ErrorContains(t, err, "decrease ratio", "every problem is reported")
}

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	assert.PanicsWithError(t, "aimd: max concurrency 0 must be at least 1", func() { New(Config{}, t0) })
	assert.Panics(t, func() { New(Config{Max: 4, DecreaseRatio: -1}, t0) })
}

func TestDefaults(t *testing.T) {
	d := New(Config{Max: 64}, t0).Config()
	assert.Equal(t, Config{Preset: Default, Max: 64, Initial: 8, Window: 5 * time.Second, IncreaseStep: 1,
		DecreaseRatio: 0.9, RepeatDecreaseRatio: 0.5, ProbeHold: 4, CollapseWindow: 15 * time.Second,
		CollapseThreshold: 2, LatencyAlpha: 0.2, LatencyTolerance: 1.25, AdmissionWindow: 4 * time.Millisecond}, d)
	p := New(Config{Preset: Phoenix, Max: 64}, t0).Config()
	assert.Zero(t, p.LatencyTolerance, "Phoenix has no latency signal")
	assert.Zero(t, p.AdmissionWindow, "Phoenix starts at Initial")
	assert.Equal(t, 64, New(Config{Preset: Phoenix, Max: 64}, t0).Limit(), "Phoenix starts at Initial")
	assert.Equal(t, 64.0, p.Initial)
	assert.Equal(t, 0.5, p.IncreaseStep)
	assert.Equal(t, 0.5, p.DecreaseRatio)
	assert.Equal(t, 5*time.Second, p.Window)
	assert.Equal(t, 15*time.Second, p.CollapseWindow)
	assert.Equal(t, 2, p.CollapseThreshold)
	assert.Equal(t, 0.2, p.LatencyAlpha)
}
