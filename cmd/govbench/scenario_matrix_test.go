package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cell cut off at its time limit says so: the calls it did not finish,
// its makespan and goodput as bounds, and, for the default preset, that
// it missed its goal for that reason too.
func TestWriteMatrixCutOff(t *testing.T) {
	results := make([]callResult, 10)
	for i := range 6 {
		results[i] = callResult{ID: "ok", Sent: true, Status: 200, Attempts: 1}
	}
	results[6] = callResult{Sent: true, Err: context.DeadlineExceeded}
	st := mockStats{Answered: map[int]int64{200: 6}}
	tl := tallyCalls(results, st)
	require.Equal(t, 4, tl.unfinished, "one cancelled, three never sent")

	run := func(preset string, cutOff bool) matrixRun {
		return matrixRun{
			goodputRun: goodputRun{title: "cap 4, 500ms", preset: preset, optimum: 15 * time.Second,
				makespan: 130 * time.Second, cutOff: cutOff, tally: tl},
			goal: matrixGoal{goodput: 0.95, per100: 2},
		}
	}
	var b strings.Builder
	writeMatrix(&b, []matrixRun{run("default", true), run("phoenix", true)})
	rows := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, rows, 6, "title, blank, header, rule and two rows:\n%s", b.String())
	for _, row := range rows[4:] {
		assert.Contains(t, row, "| 10 (4 unfinished) |", "the cell's calls and those unfinished")
		assert.Contains(t, row, "> 130.0 s")
		assert.Contains(t, row, "< 0.115")
	}
	assert.Contains(t, rows[4], "**missed** (goodput < 0.95, cut off)")

	ok, _ := run("default", false).met()
	assert.False(t, ok, "unfinished calls miss the goal even when the makespan does not show it")
}

func TestTallyCallsText(t *testing.T) {
	assert.Equal(t, "3", tally{total: 3, calls: 3}.callsText())
	assert.Equal(t, "7680 (5500 unfinished)", tally{total: 7680, calls: 2266, unfinished: 5500}.callsText())
}
