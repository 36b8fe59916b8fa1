package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"overhead", "s1", "s2", "s3", "s4", "s2shared", "memory", "tenants"}, o.scenarios, "all but the matrix")
	assert.Equal(t, 10*time.Second, o.tenantsDuration)
	assert.Equal(t, []int{1, 2, 4, 8, 16, 64, 256}, o.matrixCaps)
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second}, o.matrixLatencies)
	assert.Equal(t, []int{4, 8, 32}, o.matrixKnees)
	assert.True(t, o.matrixTokens)
	assert.Equal(t, []int{1, 16, 64}, o.concurrency)
	assert.Equal(t, []string{"default", "phoenix"}, o.presets)
	assert.Equal(t, time.Minute, o.goodputDuration)

	o, err = parseOptions([]string{"-smoke", "-calls", "128", "-scenarios", "memory,s2,overhead"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"overhead", "s2", "memory"}, o.scenarios, "run order, not flag order")
	assert.Equal(t, []int{16}, o.concurrency, "smoke default")
	assert.Equal(t, []string{"default"}, o.presets, "smoke default")
	assert.Equal(t, 128, o.calls, "a flag given wins over the smoke default")

	o, err = parseOptions([]string{"-scenarios", "matrix", "-matrix-caps", "8,2", "-matrix-knees", "none", "-matrix-tokens=false"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 8}, o.matrixCaps)
	assert.Empty(t, o.matrixKnees, "none: no knee cells")
	cells := matrixSpecs(o)
	require.Len(t, cells, 6, "caps 2 and 8 at three latencies, no token or knee cells")
	for _, c := range cells {
		assert.Contains(t, c.name, "cap")
	}
	assert.Empty(t, o.matrixStreamKnees, "no streamed knee cells by default")

	o, err = parseOptions([]string{"-scenarios", "matrix", "-matrix-caps", "none", "-matrix-knees", "8", "-matrix-stream-knees", "8", "-matrix-tokens=false"}, io.Discard)
	require.NoError(t, err)
	cells = matrixSpecs(o)
	require.Len(t, cells, 2, "knee 8, then knee 8 streamed")
	assert.Equal(t, "knee8", cells[0].name)
	assert.Equal(t, "knee8-stream", cells[1].name)
	assert.Equal(t, 8, cells[1].reference, "judged against 8 clients sent straight to the server")
	assert.Equal(t, cells[0].mock.knee, cells[1].mock.knee)
	assert.Contains(t, string(cells[1].request("http://x", 0).body), `"stream":true`)
	assert.NotContains(t, string(cells[0].request("http://x", 0).body), `"stream":true`)
	assert.Greater(t, cells[1].optimum, cells[0].optimum, "a streamed call lasts its tokens longer")

	_, err = parseOptions([]string{"-matrix-caps", ""}, io.Discard)
	assert.Error(t, err, "an empty list is a mistake; none says no cells")

	o, err = parseOptions([]string{"-governor-env", "GOVERNOR_MAX_PAUSE=1ms", "-governor-env", "GOVERNOR_ROUTES=a=http://x,b=http://y"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"GOVERNOR_MAX_PAUSE=1ms", "GOVERNOR_ROUTES=a=http://x,b=http://y"}, o.governorEnv)

	assert.Equal(t, []coordination{coordNone, coordRedis, coordRedisKilled}, o.s4Variants, "every S4 row by default")
	o, err = parseOptions([]string{"-scenarios", "s4", "-s4-latency", "100ms", "-s4-variants", "killed,redis"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, sharedLatency(o), "-s4-latency sets S4's latency")
	assert.Equal(t, 480*time.Millisecond, goodputLatency(o), "and not the other scenarios'")
	assert.Equal(t, []coordination{coordRedis, coordRedisKilled}, o.s4Variants, "run order, not flag order")

	assert.Equal(t, []int{2, 4}, o.bucketShareGovernors, "S2 shared by 2 and 4 Governors by default")
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 480 * time.Millisecond}, o.bucketShareLatencies)
	assert.Equal(t, []coordination{coordNone, coordRedis}, o.bucketShareVariants)
	assert.Equal(t, []shareBudget{shareRequests, shareTPM}, o.bucketShareBudgets, "the request budget and the token budget by default")
	o, err = parseOptions([]string{"-scenarios", "s2shared", "-s2shared-governors", "8,3", "-s2shared-latencies", "2s,100ms", "-s2shared-variants", "redis", "-s2shared-budgets", "tpm"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"s2shared"}, o.scenarios)
	assert.Equal(t, []int{3, 8}, o.bucketShareGovernors)
	assert.Equal(t, []time.Duration{2 * time.Second, 100 * time.Millisecond}, o.bucketShareLatencies, "in the order given")
	assert.Equal(t, []coordination{coordRedis}, o.bucketShareVariants)
	assert.Equal(t, []shareBudget{shareTPM}, o.bucketShareBudgets)
	o, err = parseOptions([]string{"-s2shared-budgets", "tpm-noheaders,tpm,requests"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []shareBudget{shareRequests, shareTPM, shareTPMNoHeaders}, o.bucketShareBudgets, "run order, not flag order")

	for _, args := range [][]string{
		{"-s2shared-governors", "0"},
		{"-s2shared-governors", "65"},
		{"-s2shared-latencies", "0s"},
		{"-s2shared-latencies", ""},
		{"-s2shared-variants", "killed"},
		{"-s2shared-budgets", "rpm"},
		{"-s2shared-budgets", ""},
		{"-s2shared-duration", "0s"},
		{"-s4-variants", "sometimes"},
		{"-s4-variants", ""},
		{"-s4-latency", "-1s"},
		{"-scenarios", "s5"},
		{"-presets", "aggressive"},
		{"-concurrency", "0"},
		{"-calls", "10"},
		{"-tenants-duration", "0s"},
		{"extra"},
		{"-governor-env", "PATH=/bin"},
	} {
		_, err := parseOptions(args, io.Discard)
		assert.Error(t, err, "%q", args)
	}
}

func TestGoodputSpecs(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	specs := goodputSpecs(o)
	assert.Equal(t, 480*time.Millisecond, goodputLatency(o))
	for _, name := range []string{"s1", "s2", "s3"} {
		assert.InDelta(t, time.Minute.Seconds(), specs[name].optimum.Seconds(), 0.01, "%s is sized to -goodput-duration", name)
	}
	assert.Equal(t, 3000, specs["s3"].calls)
	assert.Equal(t, "20s:cap=8,40s:cap=32", specs["s3"].mock.schedule)
}

func TestBucketShareOptimum(t *testing.T) {
	// S2's bucket at its default size: 33.0 a second, burst 33.
	o, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	s2 := goodputSpecs(o)["s2"]
	assert.InDelta(t, 33.04, s2.mock.rate, 0.01)
	assert.Equal(t, 33, s2.mock.burst)
	assert.InDelta(t, 33+s2.mock.rate*14.52, bucketShareOptimum(s2.mock.burst, s2.mock.rate, 15*time.Second, 480*time.Millisecond), 1e-9,
		"the burst, then the refill, each call taking L")
	assert.Zero(t, bucketShareOptimum(33, 33, 100*time.Millisecond, time.Second), "no call can finish before L")
}
