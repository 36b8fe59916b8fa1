package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		data []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond}, // unsorted input
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},    // nearest rank: ceil(2) = 2nd
		{ms(1, 2, 3, 4), 75, 3 * time.Millisecond},
		{ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{ms(1, 2, 3, 4), 1, 1 * time.Millisecond},
	} {
		assert.Equal(t, c.want, percentile(c.data, c.p), "p%v of %v", c.p, c.data)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		x    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3, 3, 3, 3}, 1},
		{[]float64{4, 0, 0, 0}, 0.25}, // one takes everything: 1/n
		{[]float64{0, 0}, 1},
		{[]float64{1, 2}, 0.9}, // 9 / (2·5)
	} {
		assert.InDelta(t, c.want, jain(c.x), 1e-12, "jain(%v)", c.x)
	}
}
