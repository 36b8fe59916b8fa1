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
	mock, mockURL := startMock(t, mockllm.Config{Latency: 400 * time.Millisecond})
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

// Started under nohup, Governor stays deaf to hang-ups, as nohup asks: the
// terminal closing leaves it serving. The SIGTERM sent after the SIGHUP is
// then the only signal it hears: it drains and exits 0, where a SIGHUP
// caught too would be a second signal, which exits 1 at once.
func TestSIGHUPIgnoredUnderNohup(t *testing.T) {
	g := startGovernorVia(t, []string{"nohup"})
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGHUP))
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
	lines := g.logLines(t, "draining")
	require.Len(t, lines, 1, g.logs())
	assert.Equal(t, syscall.SIGTERM.String(), lines[0]["signal"], "the drain's signal")
	assert.NotContains(t, g.logs(), "second signal")
}
