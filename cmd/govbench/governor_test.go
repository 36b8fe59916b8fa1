package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP ignored
# TYPE governor_lane_decreases_total counter
governor_lane_decreases_total{lane="a"} 3
governor_lane_decreases_total{lane="b",x="{ }"} 2
governor_lane_target{lane="a"} 15.5
go_goroutines 12
go_memstats_stack_inuse_bytes 1.048576e+06
malformed
`
	assert.Equal(t, map[string]float64{
		"governor_lane_decreases_total": 5,
		"governor_lane_target":          15.5,
		"go_goroutines":                 12,
		"go_memstats_stack_inuse_bytes": 1 << 20,
	}, parseMetrics(text))
}
