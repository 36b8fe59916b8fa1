package main

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A hang-up (the terminal Governor runs in closes, or an operator's
// kill -HUP) drains Governor like SIGTERM: the calls in flight and queued
// complete, then it exits 0. Go's default for SIGHUP is to exit at once,
// which dropped every call in progress.
func TestSIGHUPDrainsLikeSIGTERM(t *testing.T) {
	mock, mockURL, stop, err := mockllm.Start(mockllm.Config{Latency: 400 * time.Millisecond})
	require.NoError(t, err)
	defer stop()
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=2", "GOVERNOR_AIMD_INITIAL=2", "GOVERNOR_DRAIN_TIMEOUT=30s")

	answers := make([]answer, 4)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = call(g.base, false, i) })
	}
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 2 && g.queued(t) == 2 }, 10*time.Second, 5*time.Millisecond,
		"two calls in flight and two queued when the signal comes")

	require.NoError(t, g.cmd.Process.Signal(syscall.SIGHUP))
	wg.Wait()
	for i, a := range answers {
		assert.NoError(t, complete(a, false), "call %d", i)
	}
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
	assert.Contains(t, g.stderr.String(), `"msg":"drained"`)
}
