package aimd

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

func TestZZS3(t *testing.T) {
	var gs []float64
	miss := 0
	var rec []float64
	for seed := uint64(1); seed <= 200; seed++ {
		p := scenario("s3", 480*time.Millisecond, seed)
		p.Hint = time.Second
		phase := 125 * 480 * time.Millisecond / 3
		// time from the rise to 32 until the limit first reaches 30
		var reached time.Duration
		p.Trace = func(now time.Duration, limit, inFlight int, ev Event) {
			if now > 2*phase && reached == 0 && limit >= 30 {
				reached = now - 2*phase
			}
		}
		r := simulate(simConfig(Default), p)
		gs = append(gs, r.Goodput)
		rec = append(rec, reached.Seconds())
		if r.Goodput < 0.95 {
			miss++
			fmt.Printf("seed %d goodput %.3f 429/100 %.2f recovery %.2fs\n", seed, r.Goodput, r.Per100, reached.Seconds())
		}
	}
	sort.Float64s(rec)
	fmt.Printf("misses %d/200; recovery to 30: median %.2f p90 %.2f max %.2f\n", miss, rec[100], rec[180], rec[199])
}
