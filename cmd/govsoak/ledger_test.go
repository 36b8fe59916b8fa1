package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckCountsLostAndDuplicatedCalls(t *testing.T) {
	var l ledger
	for _, r := range []record{
		{id: "a", kind: kindChat, outcome: completed, attempts: 1},
		{id: "b", kind: kindChat, outcome: completed, attempts: 3},          // retried twice: the provider saw 3
		{id: "c", kind: kindStream, outcome: completed, attempts: 1},        // the provider saw it twice
		{id: "d", kind: kindBatchItem, outcome: failed, attempts: 11},       // gave up with an answer
		{id: "e", kind: kindAsyncItem, outcome: lost, why: "no row"},        // no answer: attempts unknown
		{id: "f", kind: kindAnthropic, outcome: completed, attempts: 2},     // one attempt never reached the provider
		{id: "g", kind: kindChat, outcome: lost, why: "cut", attempts: 1},   // a cut answer
		{id: "h", kind: kindChat, outcome: completed, attempts: 1, took: 5}, // the provider's table lost it: not a duplicate
	} {
		l.add(r)
	}
	seen := map[string]int64{"a": 1, "b": 3, "c": 2, "d": 11, "e": 4, "f": 1, "g": 1}
	tl := l.check(seen)
	assert.Equal(t, 8, tl.calls)
	assert.Equal(t, 5, tl.completed)
	assert.Equal(t, 1, tl.failed)
	assert.Equal(t, 2, tl.lost)
	assert.Equal(t, 1, tl.duplicated, "only c: e's attempts are unknown")
	assert.Equal(t, 2, tl.unseen, "f and h")
	assert.Equal(t, 1, tl.byKind[kindStream].duplicated)
	assert.Equal(t, 1, tl.byKind[kindAsyncItem].lost)
	assert.Equal(t, 1+3+1+11+0+2+1+1, tl.attempts)
	require.NotEmpty(t, tl.examples)
	assert.Contains(t, strings.Join(tl.examples, "\n"), "duplicated chat (SSE stream) c: the provider saw it 2 times")
}

func TestBatchRowsMustBeWhole(t *testing.T) {
	rows, err := rowsOf([]byte(`{"outputs":[{"status_code":200,"body":{"x":1}},null],
		"details":[{"status":"COMPLETED","attempts":1},{"status":"FAILED","attempts":3,"errors":["500 server_error"]}]}`))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, "FAILED", rows[1].Detail.Status)
	_, err = rowsOf([]byte(`{"outputs":[null],"details":[]}`))
	assert.Error(t, err, "outputs and details must pair up")

	ndjson := `{"index":1,"custom_id":"b","output":null,"detail":{"status":"FAILED","attempts":2}}
{"index":0,"custom_id":"a","output":{"status_code":200,"body":{}},"detail":{"status":"COMPLETED","attempts":1}}
`
	rows, err = rowsOfNDJSON([]byte(ndjson + `{"summary":{"total":2}}` + "\n"))
	require.NoError(t, err)
	assert.Equal(t, 2, rows[1].Detail.Attempts)
	assert.Equal(t, "COMPLETED", rows[0].Detail.Status)
	_, err = rowsOfNDJSON([]byte(ndjson))
	assert.ErrorContains(t, err, "no summary line", "a progress stream cut before its summary")
}

func TestRecordItems(t *testing.T) {
	var l ledger
	d := &driver{ledger: &l}
	rows, err := rowsOf([]byte(`{"outputs":[{"status_code":200,"body":{"x":1}},null,{"status_code":200,"body":{}}],
		"details":[{"status":"COMPLETED_WITH_RETRIES","attempts":2},{"status":"DID_NOT_RUN","attempts":0},{"status":"COMPLETED","attempts":1}]}`))
	require.NoError(t, err)
	d.recordItems(kindBatchItem, []string{"a", "b", "c", "d"}, rows, time.Second)
	tl := l.check(map[string]int64{"a": 2, "c": 1})
	assert.Equal(t, 1, tl.completed)
	assert.Equal(t, 3, tl.lost, "b did not run, c's body is empty, d has no row")
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_goroutines x
go_goroutines 42
governor_lane_queued{lane="default/m/ab"} 3
governor_lane_queued{lane="a b {x}"} 4 1700000000
governor_in_flight_requests 7
go_goroutines_other 9
`
	m := parseMetrics(text, "go_goroutines", "governor_lane_queued", "governor_in_flight_requests")
	assert.Equal(t, map[string]float64{"go_goroutines": 42, "governor_lane_queued": 7, "governor_in_flight_requests": 7}, m)
}

func TestParseProcStatus(t *testing.T) {
	st := parseProcStatus(strings.NewReader("Name:\tgovernor\nVmRSS:\t   12345 kB\nThreads:\t9\n"))
	assert.Equal(t, 12345, st["VmRSS"])
	assert.Equal(t, 9, st["Threads"])
}

func TestSmokeOptions(t *testing.T) {
	o, err := parseOptions([]string{"-smoke"})
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, o.duration)
	assert.Equal(t, 2*time.Second, o.sample)
	o, err = parseOptions([]string{"-smoke", "-duration", "1m"})
	require.NoError(t, err)
	assert.Equal(t, time.Minute, o.duration, "an explicit flag wins")
	assert.Equal(t, "go run ./cmd/govsoak -smoke -duration 1m", o.commandLine)
	_, err = parseOptions([]string{"-duration", "0s"})
	assert.Error(t, err)
}

func TestLastLiveHeap(t *testing.T) {
	log := `{"level":"WARN","msg":"x"}
gc 1 @0.024s 6%: 1.1+3.4+0.006 ms clock, 2.3+0.11/2.4/0+0.013 ms cpu, 3->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 2 @4.045s 0%: 0.1+1+0.01 ms clock, 0.2+0/0.5/1+0.02 ms cpu, 6->6->13 MB, 8 MB goal, 0 MB stacks, 0 MB globals, 2 P
`
	assert.Equal(t, 13, lastLiveHeap(strings.NewReader(log)))
	assert.Equal(t, -1, lastLiveHeap(strings.NewReader(`{"level":"WARN"}`)))
}
