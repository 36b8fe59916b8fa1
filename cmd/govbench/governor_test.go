package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseLaneEvents(t *testing.T) {
	text := `# HELP ignored
governor_lane_decreases_total{lane="a"} 3
governor_lane_decreases_total{lane="b"} 2
governor_lane_collapses_total{lane="a"} 1
governor_lane_pauses_total{lane="a"} 7
governor_lane_target{lane="a"} 15.5
governor_requests_total{route="default",code="2xx"} 100
`
	assert.Equal(t, laneEvents{decreases: 5, collapses: 1, pauses: 7}, parseLaneEvents(text))
}
