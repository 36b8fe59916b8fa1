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

// A knee cell is judged against running at the knee, measured in the same
// run, not against the optimum: a Governor as fast as the reference meets
// its goal even though the lognormal latencies keep both from the optimum.
func TestKneeCellIsJudgedAgainstItsReference(t *testing.T) {
	run := matrixRun{
		goodputRun: goodputRun{title: "knee 8 (no 429s)", preset: "default", optimum: 15 * time.Second,
			makespan: 17 * time.Second, tally: tally{total: 240, calls: 240}},
		goal:      matrixGoal{goodput: 0.90, per100: 2},
		reference: 16 * time.Second,
	}
	assert.InDelta(t, 15.0/17, run.goodput(), 1e-9, "the optimum's share")
	assert.InDelta(t, 16.0/17, run.score(), 1e-9, "the reference's share")
	ok, miss := run.met()
	assert.True(t, ok, miss)

	run.makespan = 18 * time.Second // 16/18 = 0.889
	ok, miss = run.met()
	assert.False(t, ok)
	assert.Equal(t, "goodput < 0.90", miss)

	var b strings.Builder
	writeMatrix(&b, []matrixRun{run})
	assert.Contains(t, b.String(), " 16.0 s, 0.889 |")
	assert.Contains(t, b.String(), "≥ 0.90 of running at the knee, ≤ 2 per 100: **missed** (goodput < 0.90)")

	cap := matrixRun{goodputRun: run.goodputRun, goal: run.goal}
	assert.InDelta(t, cap.goodput(), cap.score(), 1e-9, "a cell without a reference is judged against its optimum")
}

// A reference that failed a call measured nothing.
func TestReferenceOutcome(t *testing.T) {
	ok := []callResult{
		{Sent: true, Status: 200, End: 3 * time.Second},
		{Sent: true, Status: 200, End: 5 * time.Second},
	}
	got, err := referenceOutcome("knee 4", ok)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, got, "the last call's end")

	_, err = referenceOutcome("knee 4", append(ok, callResult{Sent: true, Status: 500}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "knee 4, reference: call 2 of 3: status 500")

	_, err = referenceOutcome("knee 4", append(ok, callResult{}))
	require.Error(t, err, "a call never sent")
}
