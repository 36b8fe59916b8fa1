package main

import (
	"context"
	"errors"
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
	st.Answered[200] = 6
	assert.Equal(t, 3, tallyCalls(results, st).duplicated, "2xx answers beyond the calls answered 2xx")
}
