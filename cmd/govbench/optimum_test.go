package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestOptimumCap(t *testing.T) {
	l := 480 * time.Millisecond
	assert.Equal(t, 60*time.Second, optimumCap(2000, 16, l), "2000 calls, cap 16: 125 rounds")
	assert.Equal(t, 126*l, optimumCap(2001, 16, l), "one call more is one round more")
	assert.Equal(t, l, optimumCap(3, 16, l))
}

func TestOptimumBucket(t *testing.T) {
	l := 500 * time.Millisecond
	assert.Equal(t, 10*time.Second+l, optimumBucket(120, 20, 10, l), "(120−20)/10 s + L")
	assert.Equal(t, l, optimumBucket(20, 20, 10, l), "the burst covers every call")
}

func TestOptimumSchedule(t *testing.T) {
	l := time.Second
	// One phase: n·L/c.
	assert.Equal(t, 125*time.Second, optimumSchedule(2000, l, []capPhase{{0, 16}}))
	// 32 → 8 → 32 at 20 s and 40 s: 640 + 160 calls by 40 s, then 32/s.
	phases := []capPhase{{0, 32}, {20 * time.Second, 8}, {40 * time.Second, 32}}
	assert.Equal(t, 10*time.Second, optimumSchedule(320, l, phases), "within the first phase")
	assert.Equal(t, 30*time.Second, optimumSchedule(720, l, phases), "640 + 10 s at 8")
	assert.Equal(t, 60*time.Second, optimumSchedule(1440, l, phases), "24 calls per second on average")
	assert.Equal(t, 5*time.Second, optimumSchedule(80, 2*l, phases[:1]), "latency scales the need")
}

func TestPhaseUses(t *testing.T) {
	s := time.Second
	var samples []laneSample
	for i, inFlight := range []int{8, 16, 16, 16, 32, 8, 4, 8} {
		samples = append(samples, laneSample{at: time.Duration(i) * s, inFlight: []int{inFlight}})
	}
	changes := []capChange{{at: 0, capacity: 16, label: "start"}, {at: 4 * s, capacity: 8, label: "→8"}}
	got := phaseUses(samples, changes, 8*s, func(l laneSample) float64 { return float64(l.inFlight[0]) })
	// Phase 1: (8+16+16+16)/4/16; phase 2: min(32, 8) counts 8: (8+8+4+8)/4/8.
	assert.Equal(t, []phaseUse{{"start", 0.875}, {"→8", 0.875}}, got)
}
