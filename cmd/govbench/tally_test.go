package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTallyCalls(t *testing.T) {
	results := []callResult{
		{ID: "a", Sent: true, Status: 200, Attempts: 1},
		{ID: "b", Sent: true, Status: 200, Attempts: 3},            // two 429s absorbed
		{ID: "c", Sent: true, Status: 200, Attempts: 1},            // the provider saw it twice
		{ID: "d", Sent: true, Status: 429, Attempts: 11},           // retries spent: lost
		{ID: "e", Sent: true, Err: errors.New("connection reset")}, // lost
		{ID: "f", Sent: true, Err: context.DeadlineExceeded},       // cut off by the run
		{}, // never sent
	}
	st := mockStats{
		RateLimited: 12,
		Answered:    map[int]int64{200: 4, 429: 12},
		ByRequestID: map[string]int64{"a": 1, "b": 3, "c": 2, "d": 11, "e": 1},
	}
	tl := tallyCalls(results, st)
	assert.Equal(t, 6, tl.calls)
	assert.Equal(t, 3, tl.ok)
	assert.Equal(t, 2, tl.lost)
	assert.Equal(t, 2, tl.unfinished)
	assert.Equal(t, 1, tl.duplicated)
	assert.Equal(t, "2 (429: 1, no answer: 1)", tl.lostText())
	assert.InDelta(t, 200.0, tl.per100(), 1e-9, "12 429s for 6 calls")

	st.ByRequestID["c"] = 1
	st.Answered[200] = 9
	assert.Equal(t, 3, tallyCalls(results, st).duplicated, "2xx answers beyond the calls sent")
}

// A run cut off at its time limit cancels the calls in flight; the
// provider may still answer some of them 2xx before Governor notices that
// their clients left. Those answers are of calls counted unfinished, each
// served once: nothing is duplicated.
func TestTallyCallsCutOff(t *testing.T) {
	results := []callResult{
		{ID: "a", Sent: true, Status: 200, Attempts: 1},
		{ID: "b", Sent: true, Status: 200, Attempts: 2},
		{ID: "c", Sent: true, Err: context.DeadlineExceeded}, // in flight at the provider when cut off
		{ID: "d", Sent: true, Status: 200, Attempts: 1, // its answer was being read when cut off
			Err: fmt.Errorf("reading the answer: %w", context.DeadlineExceeded)},
		{ID: "e", Sent: true, Err: context.DeadlineExceeded}, // waiting in Governor's queue
		{}, {}, // never sent
	}
	st := mockStats{
		RateLimited: 1,
		Answered:    map[int]int64{200: 4, 429: 1},
		ByRequestID: map[string]int64{"a": 1, "b": 2, "c": 1, "d": 1},
	}
	tl := tallyCalls(results, st)
	assert.Equal(t, 5, tl.calls)
	assert.Equal(t, 2, tl.ok)
	assert.Equal(t, 0, tl.lost)
	assert.Equal(t, 5, tl.unfinished)
	assert.Equal(t, 0, tl.duplicated, "c and d were answered once each, after their clients left")

	st.Answered[200] = 6
	assert.Equal(t, 1, tallyCalls(results, st).duplicated, "more 2xx answers than calls sent")
	st.Answered[200] = 4
	st.ByRequestID["d"] = 2
	assert.Equal(t, 1, tallyCalls(results, st).duplicated, "the provider saw d twice, Governor tried it once")
}
