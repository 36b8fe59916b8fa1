package aimd_test

import (
	"fmt"
	"time"

	"github.com/llmgovernor/governor/aimd"
)

// The Default preset reacting to samples. Each call takes about a second.
func Example() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := aimd.New(aimd.Config{Max: 16, Initial: 4, AdmissionWindow: -1}, start) // no admission ramp: starts at Initial
	show := func(what string, ev aimd.Event) { fmt.Printf("%-34s %-9v limit %d\n", what, ev, c.Limit()) }

	now := start.Add(time.Second)
	for range 4 {
		// The lane uses its whole limit: slow start, +2 per success
		// while no level that failed is remembered.
		ev := c.ObserveAt(aimd.Sample{Outcome: aimd.Success, Latency: time.Second, InFlight: c.Limit()}, now)
		show("success at the limit", ev)
		now = now.Add(10 * time.Millisecond)
	}
	ev := c.ObserveAt(aimd.Sample{Outcome: aimd.Success, Latency: time.Second, InFlight: 3}, now)
	show("success with 3 in flight", ev)

	ev = c.ObserveAt(aimd.Sample{Outcome: aimd.RateLimited, Latency: 50 * time.Millisecond, InFlight: 12}, now)
	show("429", ev)
	// Sent before that decrease: already accounted for.
	ev = c.ObserveAt(aimd.Sample{Outcome: aimd.RateLimited, Latency: time.Second, InFlight: 12}, now.Add(time.Millisecond))
	show("429 from an older call", ev)
	ev = c.ObserveAt(aimd.Sample{Outcome: aimd.Failure, Latency: time.Second, InFlight: 11}, now.Add(2*time.Millisecond))
	show("500", ev)

	st := c.State()
	fmt.Printf("target %.1f, decreased at level %.0f, %d decrease(s)\n", st.Target, st.DecreaseLevel, st.Decreases)
	// Output:
	// success at the limit               increased limit 6
	// success at the limit               increased limit 8
	// success at the limit               increased limit 10
	// success at the limit               increased limit 12
	// success with 3 in flight           none      limit 12
	// 429                                decreased limit 10
	// 429 from an older call             none      limit 10
	// 500                                none      limit 10
	// target 10.5, decreased at level 12, 1 decrease(s)
}

// The Phoenix preset: feedback windows of 5 seconds.
func Example_phoenix() {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := aimd.New(aimd.Config{Preset: aimd.Phoenix, Max: 16, Initial: 8}, start)
	ok := aimd.Sample{Outcome: aimd.Success, Latency: time.Second}
	limited := aimd.Sample{Outcome: aimd.RateLimited}
	for _, step := range []struct {
		sec float64
		s   aimd.Sample
	}{
		{1, ok}, {5, ok}, {10, ok}, // two clean windows: +0.5 each
		{12, limited}, {15, ok}, // a window with a 429: halved
		{20, limited}, // a second 429 within 15s: collapse
	} {
		now := start.Add(time.Duration(step.sec * float64(time.Second)))
		ev := c.ObserveAt(step.s, now)
		fmt.Printf("%2.0fs %-12v %-9v target %.2f limit %d\n", step.sec, step.s.Outcome, ev, c.State().Target, c.Limit())
	}
	// Output:
	//  1s success      none      target 8.00 limit 8
	//  5s success      none      target 8.50 limit 8
	// 10s success      increased target 9.00 limit 9
	// 12s rate_limited none      target 9.00 limit 9
	// 15s success      decreased target 4.50 limit 4
	// 20s rate_limited collapsed target 0.50 limit 1
}
