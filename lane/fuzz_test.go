package lane

import (
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzPacer feeds a request budget, however odd, to a lane's pacer: no
// dispatch is ever held longer than maxDelay, nor, with a bound on the gap,
// longer than a gap per token it waits for.
func FuzzPacer(f *testing.F) {
	for _, s := range []struct {
		limit, remaining float64
		reset            time.Duration
	}{
		{10, 0, 900 * time.Millisecond}, {10000, 9999, 6 * time.Millisecond}, {1, 0, 24 * time.Hour}, {1e-300, 0, time.Second},
		{1e308, 0, 1}, {math.NaN(), math.NaN(), 0}, {-1, 5, time.Second}, {5, 10, -time.Second},
		{math.Inf(1), 0, time.Second}, {10, 0, math.MaxInt64}, {50, 0, 10 * time.Second},
	} {
		f.Add(s.limit, s.remaining, int64(s.reset))
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, limit, remaining float64, reset int64) {
		b := Budget{Limit: limit, Remaining: remaining, Reset: time.Duration(reset)}
		for _, maxGap := range []time.Duration{0, time.Second} {
			p := pacer{maxGap: maxGap}
			seq, _ := p.reserve(now)
			p.observe(b, seq, now, now)
			for i := range 3 {
				_, delay := p.reserve(now.Add(time.Duration(i) * time.Millisecond))
				// With a bound, the i-th call after the report waits
				// for at most i+1 tokens, each at most maxGap away.
				if delay < 0 || delay > maxDelay || maxGap > 0 && delay > time.Duration(i+1)*maxGap {
					t.Fatalf("%+v: dispatch %d held %v (max gap %v)", b, i, delay, maxGap)
				}
			}
		}
	})
}

// FuzzLabelSafe checks that whatever the model, the lane id and metric
// label built from it are short and plain, and that a model shown in part
// is marked so (with "~" and a hash), never mistaken for one shown whole.
func FuzzLabelSafe(f *testing.F) {
	for _, s := range []string{"", "gpt-4o", "claude-3-5-sonnet@20240620", `a"b`, "é", strings.Repeat("m", 100), "a\nb{c}", "a~b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		l := labelSafe(m)
		if len(l) == 0 || len(l) > maxLabel {
			t.Fatalf("%q: label %q", m, l)
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !labelByte(rune(c)) && c != '~' {
				t.Fatalf("%q: label %q has %q", m, l, c)
			}
		}
		if shownWhole := !strings.Contains(l, "~"); shownWhole != (l == m) && m != "" {
			t.Fatalf("%q: label %q", m, l)
		}
	})
}
