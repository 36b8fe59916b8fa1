package aimd

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Preset selects the rules a Controller follows.
type Preset uint8

const (
	// Default is Governor's own controller: AIMD clocked by round trips,
	// with a remembered decrease level, slow start below it, probing above
	// it, and a collapse reserved for genuine storms. See the package
	// documentation.
	Default Preset = iota
	// Phoenix reproduces Arize Phoenix's ConcurrencyController exactly:
	// fixed feedback windows, +IncreaseStep on a clean window,
	// ×DecreaseRatio on a window with a 429 or a timeout, collapse to 1
	// on CollapseThreshold 429s within CollapseWindow.
	Phoenix
)

var presetNames = [...]string{"default", "phoenix"}

func (p Preset) String() string {
	if int(p) < len(presetNames) {
		return presetNames[p]
	}
	return fmt.Sprintf("preset(%d)", int(p))
}

// ParsePreset parses a preset name ("default" or "phoenix", any case).
// The empty string is Default.
func ParsePreset(s string) (Preset, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "default":
		return Default, nil
	case "phoenix":
		return Phoenix, nil
	}
	return 0, fmt.Errorf("aimd: unknown preset %q (want %q or %q)", s, "default", "phoenix")
}

// Defaults. Where the presets differ, the Phoenix value is Phoenix's
// ConcurrencyController default and the Default value was chosen with the
// simulation in sim_test.go.
const (
	DefaultWindow            = 5 * time.Second  // Phoenix window_seconds
	DefaultCollapseWindow    = 15 * time.Second // Phoenix collapse_window_seconds
	DefaultCollapseThreshold = 2                // Phoenix collapse_error_threshold
	DefaultLatencyAlpha      = 0.2              // Phoenix smoothing_factor

	PhoenixIncreaseStep  = 0.5 // Phoenix increase_step
	PhoenixDecreaseRatio = 0.5 // Phoenix decrease_ratio

	DefaultInitial             = 8                    // Default preset: starting target (capped at Max)
	DefaultIncreaseStep        = 1                    // Default preset: first probe above the decrease level, per round trip
	DefaultDecreaseRatio       = 0.9                  // Default preset: cut on a fresh congestion signal
	DefaultRepeatDecreaseRatio = 0.5                  // Default preset: cut when the previous cut did not help
	DefaultProbeHold           = 4                    // Default preset: most round trips held below the decrease level before probing
	DefaultLatencyTolerance    = 1.25                 // Default preset: least ratio of a level's latency to the lowest level's that is congestion
	DefaultAdmissionWindow     = 4 * time.Millisecond // Default preset: how long a start window's calls go unrefused before it grows
)

// Config configures a Controller. The zero value of every field but Max
// means "the preset's default".
type Config struct {
	Preset Preset
	// Max is the upper bound of the target. Required: New panics if it
	// is below 1.
	Max int
	// Initial is the starting target, at most Max. Zero means Max for
	// Phoenix (what its AsyncExecutor passes) and min(Max, 8) for Default.
	// In the Default preset it is also the level above which a lane gives
	// a slot back each time it overshoots (see the package doc): lanes of
	// several processes that share one account without coordination
	// settle near Initial each when it is about the account's concurrency
	// divided by the number of processes.
	Initial float64
	// Window is Phoenix's feedback window (default 5s). Unused by Default,
	// which is clocked by round trips instead.
	Window time.Duration
	// IncreaseStep is Phoenix's additive increase per clean window
	// (default 0.5). Default preset: the first increase per round trip
	// when probing above the last decrease level (default 1; it doubles
	// every further clean round trip).
	IncreaseStep float64
	// DecreaseRatio multiplies the target on a congestion signal.
	// Phoenix: per window with any 429 or timeout (default 0.5). Default
	// preset: on a congestion signal from a call dispatched after the last
	// decrease, when that decrease had been confirmed by a success
	// (default 0.9; a 429 cuts at most 2 slots below its level, see
	// DESIGN.md). Must be in (0, 1).
	DecreaseRatio float64
	// RepeatDecreaseRatio (Default preset only) multiplies the target on
	// a congestion signal that arrives when no call at all has succeeded
	// since the previous decrease, short of a collapse (so only with
	// CollapseThreshold above 2), and sets the level a collapse slow-starts
	// back to: RepeatDecreaseRatio × the pre-storm level (default 0.5). A
	// signal before the previous decrease was confirmed, while older calls
	// still succeed, multiplies by DecreaseRatio² instead. Must be in (0, 1).
	RepeatDecreaseRatio float64
	// ProbeHold (Default preset only) is the most clean round trips spent
	// at the level just below the last decrease before probing above it:
	// a lane holds 1 + limit/3 round trips, at most ProbeHold (default 4;
	// zero means the default, so the least hold is 1).
	ProbeHold int
	// CollapseWindow is the span within which CollapseThreshold signals
	// collapse the target to 1 (default 15s).
	CollapseWindow time.Duration
	// CollapseThreshold is the number of signals that collapse the target
	// (default 2). Phoenix counts 429s; Default counts congestion signals
	// that each caused a decrease with no success at all in between, in a
	// lane that has had a call succeed before (so 1 makes every decrease
	// of such a lane a collapse).
	CollapseThreshold int
	// LatencyAlpha is the weight of a new success's latency in the
	// latency EWMA (default 0.2). Must be in (0, 1].
	LatencyAlpha float64
	// LatencyTolerance (Default preset only) is the least ratio of the
	// typical latency of calls sent under one limit to that of calls
	// sent under the lowest limit the lane recently used at which the
	// provider counts as queueing calls; more where latency varies more
	// by chance. Calls that slow down that much as the limit rises cut
	// the limit back to the highest level whose calls did not; a success
	// slower than the calls sent under that lowest limit by more than
	// this and than their spread explains does not grow the limit, and
	// a timeout while the fastest calls take 4 times what they did
	// collapses the lane (default 1.25; negative turns the latency
	// signal off). See DESIGN.md.
	LatencyTolerance float64
	// AdmissionWindow (Default preset only) paces a lane's start: the
	// lane starts with one call and adds one toward Initial each time
	// the calls it has out have gone unrefused this long (the first
	// step) or half as long (the later ones; Controller.AdmitAt), since
	// a provider refuses a call it has no room for long before it
	// answers one; a refusal on the way sets the limit to the calls the
	// provider took (default 4ms; negative starts at Initial at once).
	// See DESIGN.md.
	AdmissionWindow time.Duration
}

// Validate reports the first invalid field, or nil. Zero values are valid
// (they mean the preset's default).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("aimd: "+format, args...)) }
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if c.Preset != Default && c.Preset != Phoenix {
		bad("unknown preset %d", int(c.Preset))
	}
	if c.Max < 1 {
		bad("max concurrency %d must be at least 1", c.Max)
	}
	if !finite(c.Initial) || c.Initial < 0 || (c.Max >= 1 && c.Initial > float64(c.Max)) {
		bad("initial target %v must be between 0 (preset default) and max %d", c.Initial, c.Max)
	}
	if c.Window < 0 {
		bad("window %v must not be negative", c.Window)
	}
	if !finite(c.IncreaseStep) || c.IncreaseStep < 0 {
		bad("increase step %v must not be negative", c.IncreaseStep)
	}
	if !finite(c.DecreaseRatio) || c.DecreaseRatio < 0 || c.DecreaseRatio >= 1 {
		bad("decrease ratio %v must be in (0, 1), or 0 for the default", c.DecreaseRatio)
	}
	if !finite(c.RepeatDecreaseRatio) || c.RepeatDecreaseRatio < 0 || c.RepeatDecreaseRatio >= 1 {
		bad("repeat decrease ratio %v must be in (0, 1), or 0 for the default", c.RepeatDecreaseRatio)
	}
	if c.ProbeHold < 0 {
		bad("probe hold %d must not be negative", c.ProbeHold)
	}
	if c.CollapseWindow < 0 {
		bad("collapse window %v must not be negative", c.CollapseWindow)
	}
	if c.CollapseThreshold < 0 {
		bad("collapse threshold %d must not be negative", c.CollapseThreshold)
	}
	if !finite(c.LatencyTolerance) || (c.LatencyTolerance > 0 && c.LatencyTolerance <= 1) {
		bad("latency tolerance %v must be above 1, 0 for the default, or negative for none", c.LatencyTolerance)
	}
	if c.AdmissionWindow > time.Minute {
		bad("admission window %v must be at most a minute", c.AdmissionWindow)
	}
	if !finite(c.LatencyAlpha) || c.LatencyAlpha < 0 || c.LatencyAlpha > 1 {
		bad("latency alpha %v must be in (0, 1], or 0 for the default", c.LatencyAlpha)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field replaced by the preset's
// default. c must be valid.
func (c Config) withDefaults() Config {
	if c.Initial == 0 {
		c.Initial = float64(c.Max)
		if c.Preset == Default {
			c.Initial = math.Min(DefaultInitial, float64(c.Max))
		}
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.IncreaseStep == 0 {
		c.IncreaseStep = PhoenixIncreaseStep
		if c.Preset == Default {
			c.IncreaseStep = DefaultIncreaseStep
		}
	}
	if c.DecreaseRatio == 0 {
		c.DecreaseRatio = PhoenixDecreaseRatio
		if c.Preset == Default {
			c.DecreaseRatio = DefaultDecreaseRatio
		}
	}
	if c.RepeatDecreaseRatio == 0 {
		c.RepeatDecreaseRatio = DefaultRepeatDecreaseRatio
	}
	if c.ProbeHold == 0 {
		c.ProbeHold = DefaultProbeHold
	}
	if c.CollapseWindow == 0 {
		c.CollapseWindow = DefaultCollapseWindow
	}
	if c.CollapseThreshold == 0 {
		c.CollapseThreshold = DefaultCollapseThreshold
	}
	if c.LatencyAlpha == 0 {
		c.LatencyAlpha = DefaultLatencyAlpha
	}
	if c.AdmissionWindow == 0 && c.Preset == Default {
		c.AdmissionWindow = DefaultAdmissionWindow
	}
	if c.LatencyTolerance == 0 && c.Preset == Default {
		c.LatencyTolerance = DefaultLatencyTolerance
	}
	return c
}
