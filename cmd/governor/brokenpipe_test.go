package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A Governor whose log reader goes away (its stderr piped to a process
// that exits: `governor 2>&1 | tee log` with tee gone, a log collector
// restarted) keeps serving, its log lines lost, rather than dying of
// SIGPIPE at its next line with every call in progress. Here stderr goes
// to `head -n 1`, which passes the start-up line on and exits.
func TestBrokenLogPipeKeepsServing(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{Latency: 50 * time.Millisecond})
	g := startGovernorVia(t, []string{"bash", "-c", `exec "$0" 2> >(head -n 1 >&2)`},
		"GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_ACCESS_LOG=true")

	// Each call logs (its lane's creation, its access log line): the
	// first write after head has exited finds the pipe broken.
	for i := range 3 {
		a := call(g.base, i == 2, i)
		require.NoError(t, complete(a, i == 2), "call %d", i)
	}
	select {
	case <-g.exited:
		t.Fatal("governor exited")
	default:
	}
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second), "drained and exited as usual")
}
