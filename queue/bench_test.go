package queue

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkAcquireRelease is the fast path: a slot is free and nobody waits.
func BenchmarkAcquireRelease(b *testing.B) {
	q := New(Config{Limit: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := Priority{Urgency: DefaultUrgency}
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Acquire(ctx, p); err != nil {
			b.Fatal(err)
		}
		q.ReleaseTenant("")
	}
}

func BenchmarkTryAcquireRelease(b *testing.B) {
	q := New(Config{Limit: 1})
	p := Priority{Urgency: DefaultUrgency}
	b.ReportAllocs()
	for b.Loop() {
		if !q.TryAcquire(p) {
			b.Fatal("no slot")
		}
		q.ReleaseTenant("")
	}
}

// BenchmarkAcquireReleaseContended runs 8×GOMAXPROCS goroutines against a
// limit of GOMAXPROCS/2 (at least 1), so that most calls wait in the heap.
func BenchmarkAcquireReleaseContended(b *testing.B) {
	for _, bc := range []struct {
		name string
		prio func(i int) Priority
	}{
		{"same-urgency", func(int) Priority { return Priority{Urgency: DefaultUrgency} }},
		{"mixed-urgency", func(i int) Priority { return Priority{Urgency: i % Urgencies, Retry: i%7 == 0} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q := New(Config{Limit: max(runtime.GOMAXPROCS(0)/2, 1)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if err := q.Acquire(ctx, bc.prio(i)); err != nil {
						b.Error(err)
						return
					}
					q.ReleaseTenant("")
					i++
				}
			})
			b.StopTimer()
			if s := q.Stats(); s.InFlight != 0 || s.Waiting != 0 {
				b.Fatalf("after the run: %+v", s)
			}
		})
	}
}

func BenchmarkParsePriority(b *testing.B) {
	for _, bc := range []struct{ name, header string }{
		{"absent", ""},
		{"simple", "u=5"},
		{"incremental", "i, u=2"},
		{"complex", `u=1;a=?1, x="some, text", y=(1 2.5 tok);p=:AQID:, i`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := []byte(bc.header)
			b.ReportAllocs()
			for b.Loop() {
				ParsePriority(h)
			}
		})
	}
}

// BenchmarkAcquireReleaseTenants is BenchmarkAcquireReleaseContended with
// the calls of 16 tenants, so that grants choose among tenants.
func BenchmarkAcquireReleaseTenants(b *testing.B) {
	names := make([]string, 16)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	q := New(Config{Limit: max(runtime.GOMAXPROCS(0)/2, 1)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p := Priority{Urgency: DefaultUrgency, Tenant: names[next.Add(1)%int64(len(names))]}
		for pb.Next() {
			if err := q.Acquire(ctx, p); err != nil {
				b.Error(err)
				return
			}
			q.ReleaseTenant(p.Tenant)
		}
	})
	b.StopTimer()
	if s := q.Stats(); s.InFlight != 0 || s.Waiting != 0 {
		b.Fatalf("after the run: %+v", s)
	}
}
