package aimd

import (
	"sync/atomic"
	"testing"
	"time"
)

// samples is a mix of outcomes for the benchmarks.
var benchSamples = []Sample{
	ok(1, 8), ok(1.2, 8), ok(0.9, 8), ok(1.1, 9), limited(0.01, 9),
	ok(1, 8), failed(0.5), ok(1, 8), timedOut(10), ok(1, 8),
}

func BenchmarkObserveAt(b *testing.B) {
	for _, p := range []Preset{Default, Phoenix} {
		b.Run(p.String(), func(b *testing.B) {
			c := New(Config{Preset: p, Max: 64}, t0)
			now := t0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now = now.Add(100 * time.Millisecond)
				c.ObserveAt(benchSamples[i%len(benchSamples)], now)
				i++
			}
		})
	}
}

func BenchmarkObserveAtParallel(b *testing.B) {
	c := New(Config{Max: 64}, t0)
	var tick atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			now := t0.Add(time.Duration(tick.Add(int64(time.Millisecond))))
			c.ObserveAt(benchSamples[i%len(benchSamples)], now)
			i++
		}
	})
}

func TestObserveAtDoesNotAllocate(t *testing.T) {
	for _, p := range []Preset{Default, Phoenix} {
		c := New(Config{Preset: p, Max: 64}, t0)
		now := t0
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(100 * time.Millisecond)
			c.ObserveAt(benchSamples[i%len(benchSamples)], now)
			_ = c.Limit()
			i++
		})
		if allocs != 0 {
			t.Errorf("%v: ObserveAt allocates %v times per call", p, allocs)
		}
	}
}

// TestConcurrentUse exercises the mutex under -race.
func TestConcurrentUse(t *testing.T) {
	for _, p := range []Preset{Default, Phoenix} {
		c := New(Config{Preset: p, Max: 32}, t0)
		var tick atomic.Int64
		done := make(chan struct{})
		for g := range 8 {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range 500 {
					now := t0.Add(time.Duration(tick.Add(int64(time.Millisecond))))
					c.ObserveAt(benchSamples[(g+i)%len(benchSamples)], now)
					if l := c.Limit(); l < 1 || l > 32 {
						t.Errorf("%v: limit %d out of [1, 32]", p, l)
					}
					_ = c.State()
				}
			}()
		}
		for range 8 {
			<-done
		}
	}
}
