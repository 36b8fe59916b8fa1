package mockllm

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLimiterBucketAcrossPhases(t *testing.T) {
	l := newLimiter(Config{Rate: 1, Burst: 1, Schedule: []Phase{{At: 10 * time.Second, Rate: 10, Burst: 10}}}, t0)
	a := l.admit(t0, tokenCost{})
	require.True(t, a.ok)
	assert.Equal(t, admission{ok: true, bucket: true, limit: 1, remaining: 0, full: time.Second, inFlight: 1}, a)
	l.release(0)

	a = l.admit(t0.Add(500*time.Millisecond), tokenCost{})
	assert.False(t, a.ok)
	assert.Equal(t, 500*time.Millisecond, a.next)

	// At 10s the old rate has refilled one token; the new phase keeps it and
	// refills at 10/s from there.
	a = l.admit(t0.Add(10*time.Second+100*time.Millisecond), tokenCost{})
	require.True(t, a.ok)
	assert.Equal(t, 10, a.limit)
	assert.Equal(t, 1, a.remaining, "1 kept + 1 refilled - 1 taken")
	assert.Equal(t, 900*time.Millisecond, a.full)
	l.release(0)

	lim, inFlight, peak := l.snapshot(t0.Add(time.Minute))
	assert.Equal(t, Limits{Rate: 10, Burst: 10}, lim)
	assert.Equal(t, 0, inFlight)
	assert.Equal(t, 1, peak)
}

func TestLimiterBucketStartsFullWhenAdded(t *testing.T) {
	l := newLimiter(Config{Schedule: []Phase{{At: time.Second, Rate: 2}}}, t0)
	for range 5 {
		a := l.admit(t0, tokenCost{})
		require.True(t, a.ok)
		assert.False(t, a.bucket)
	}
	a := l.admit(t0.Add(time.Second), tokenCost{})
	require.True(t, a.ok)
	assert.Equal(t, 2, a.limit, "burst defaults to the rate")
	assert.Equal(t, 1, a.remaining)
	assert.Equal(t, 6, l.inFlight)
}

func TestLimiterCapBeforeBucket(t *testing.T) {
	l := newLimiter(Config{MaxConcurrency: 1, Rate: 1, Burst: 5}, t0)
	require.True(t, l.admit(t0, tokenCost{}).ok)
	a := l.admit(t0, tokenCost{})
	assert.True(t, a.capFull)
	assert.Equal(t, 4, a.remaining, "a request refused by the cap takes no token")
	l.release(0)
	assert.True(t, l.admit(t0, tokenCost{}).ok)
}

func TestIDCounterBounded(t *testing.T) {
	c := newIDCounter(2)
	assert.Equal(t, int64(1), c.inc("a"))
	assert.Equal(t, int64(1), c.inc("b"))
	assert.Equal(t, int64(1), c.inc("c")) // a, b move to the old generation
	assert.Equal(t, int64(2), c.inc("a")) // a comes back
	assert.Equal(t, int64(1), c.inc("d")) // c, a become old; b is forgotten
	assert.Equal(t, map[string]int64{"a": 2, "c": 1, "d": 1}, c.snapshot())
	assert.Equal(t, int64(1), c.inc("b"))

	long := strings.Repeat("x", 1000)
	c.inc(long)
	assert.Equal(t, int64(2), c.inc(long+"y"), "ids are truncated")
}

func TestLatencySpread(t *testing.T) {
	s := New(Config{Latency: 100 * time.Millisecond, LatencySpread: 0.2, Seed: 7})
	defer s.Close()
	ds := make([]time.Duration, 10001)
	for i := range ds {
		ds[i], _ = s.timing(0, 1)
	}
	slices.Sort(ds)
	assert.InDelta(t, float64(100*time.Millisecond), float64(ds[len(ds)/2]), float64(3*time.Millisecond), "median")
	// Lognormal with sigma 0.2: the 84th percentile is near e^0.2 times the median.
	assert.InDelta(t, 122, float64(ds[len(ds)*841/1000])/float64(time.Millisecond), 4, "84th percentile")
	assert.Greater(t, ds[0], time.Duration(0))
}

func TestAnswerText(t *testing.T) {
	assert.Equal(t, "Simulated answer to: hi", answerText("hi", 8))
	long := answerText("hi", 40)
	assert.GreaterOrEqual(t, utf8.RuneCountInString(long), 40)
	for _, n := range []int{1, 3, 8, 40} {
		text := answerText("héllo wörld, ünïcode everywhere and then some more text", n)
		pieces := splitChunks(text, n)
		assert.Len(t, pieces, n)
		assert.Equal(t, text, strings.Join(pieces, ""), "n=%d", n)
		for _, p := range pieces {
			assert.NotEmpty(t, p, "n=%d", n)
			assert.True(t, utf8.ValidString(p), "n=%d", n)
		}
	}
}

func TestOpenAIDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		250 * time.Millisecond:  "250ms",
		time.Second:             "1s",
		1500 * time.Millisecond: "1.5s",
		6 * time.Minute:         "6m0s",
	} {
		assert.Equal(t, want, openAIDuration(d), "%v", d)
	}
}

func FuzzParseMock(f *testing.F) {
	f.Add("429,429", "250ms", int64(2))
	f.Add("reset-mid-stream, ok", "", int64(0))
	f.Add("bogus", "1h", int64(1))
	f.Fuzz(func(t *testing.T, fault, latency string, attempt int64) {
		h := http.Header{}
		h.Set(HeaderFault, fault)
		h.Set(HeaderLatency, latency)
		m, err := parseMock(h, attempt)
		if err != nil {
			return
		}
		assert.GreaterOrEqual(t, m.latency, time.Duration(0))
		if m.forced {
			known := false
			for _, f := range faultNames {
				known = known || f == m.fault
			}
			assert.True(t, known, "%q attempt %d: %+v", fault, attempt, m.fault)
		}
	})
}
