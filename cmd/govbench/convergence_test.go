package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/internal/proc"
)

func TestBand(t *testing.T) {
	for _, c := range []struct{ capacity, lo, hi float64 }{
		{8, 7, 9},        // 10% is under 1: ±1
		{16, 14.4, 17.6}, // ±10%
		{32, 28.8, 35.2},
	} {
		lo, hi := band(c.capacity)
		assert.InDelta(t, c.lo, lo, 1e-9, "capacity %v", c.capacity)
		assert.InDelta(t, c.hi, hi, 1e-9, "capacity %v", c.capacity)
	}
}

func TestConverge(t *testing.T) {
	s := time.Second
	at := []time.Duration{0, 1 * s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s, 8 * s}
	v := []float64{8, 12, 16, 20, 16, 15, 17, 16, 30}
	// In band [15, 17] from 4 s on; held 2 s at 6 s.
	d, ok := converge(at, v, 0, 8*s, 15, 17, 2*s)
	assert.True(t, ok)
	assert.Equal(t, 4*s, d, "the excursion at 3 s restarts the hold")

	d, ok = converge(at, v, 2*s, 8*s, 15, 17, 0)
	assert.True(t, ok)
	assert.Equal(t, time.Duration(0), d, "already in band at the change")

	_, ok = converge(at, v, 0, 8*s, 15, 17, 4*s)
	assert.False(t, ok, "the run leaves the band at 8 s before a 4 s hold")

	_, ok = converge(at, v, 0, 5*s, 15, 17, 2*s)
	assert.False(t, ok, "the next change comes before the hold ends")
}

func TestConvergences(t *testing.T) {
	s := time.Second
	var samples []laneSample
	for i, lim := range []int{8, 16, 16, 16, 30, 8, 8, 8, 8} {
		samples = append(samples, laneSample{at: time.Duration(i) * s, limits: []int{lim}})
	}
	changes := []capChange{{at: 0, capacity: 16, label: "start"}, {at: 4 * s, capacity: 8, label: "→8"}}
	got := convergences(samples, changes, 9*s, 2*s, func(l laneSample) float64 { return float64(l.limits[0]) })
	assert.Equal(t, []convergence{
		{change: changes[0], after: 1 * s, ok: true},
		{change: changes[1], after: 1 * s, ok: true},
	}, got)
}

func TestSharedSchedule(t *testing.T) {
	d := 100 * time.Second
	spans := sharedSpans(d)
	assert.Equal(t, [2]time.Duration{0, 70 * time.Second}, spans[0])
	assert.Equal(t, [2]time.Duration{30 * time.Second, 100 * time.Second}, spans[3])
	var caps []float64
	var labels []string
	for _, c := range sharedChanges(spans) {
		caps = append(caps, c.capacity)
		labels = append(labels, c.label)
	}
	assert.Equal(t, []float64{16, 32, 32, 32, 32, 32, 16}, caps, "one process cannot fill the cap; two fill it")
	assert.Equal(t, []string{"+1", "+2", "+3", "+4", "−1", "−2", "−3"}, labels)
}

func TestSamplerPollsUntilStopped(t *testing.T) {
	leakcheck.Check(t)
	polled := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/governor/lanes", r.URL.Path)
		fmt.Fprint(w, `{"lanes":[{"limit":12,"in_flight":7,"queued":3},{"limit":4,"in_flight":1}]}`)
		polled <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(adminClient.CloseIdleConnections)

	s := startSampler(context.Background(), 2, time.Now(), time.Millisecond)
	s.set(1, &governor{Process: &proc.Process{}, url: srv.URL})
	for range 3 {
		<-polled
	}
	samples := s.stop()
	require.NotEmpty(t, samples)
	last := samples[len(samples)-1]
	assert.Equal(t, []int{-1, 16}, last.limits, "slot 0 unset; slot 1 sums its lanes")
	assert.Equal(t, []int{-1, 8}, last.inFlight)
}

func TestWriteSamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lanes.csv")
	samples := []laneSample{
		{at: 96 * time.Millisecond, limits: []int{8, -1}, inFlight: []int{7, -1}, held: []int{2, -1}},
		{at: 1500 * time.Millisecond, limits: []int{9, 1}, inFlight: []int{9, 0}, held: []int{0, 0}},
	}
	require.NoError(t, writeSamples(path, samples))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "ms,limit1,inflight1,held1,limit2,inflight2,held2\n96,8,7,2,-1,-1,-1\n1500,9,9,0,1,0,0\n", string(b))
}
