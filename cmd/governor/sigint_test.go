package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Started with SIGINT ignored, as a shell script's background job
// (governor &) is, Governor stays deaf to it: a Ctrl-C meant for the
// script's foreground leaves it serving. The SIGTERM sent after the
// SIGINT is then the only signal it hears: it drains and exits 0, where a
// SIGINT caught too would be a second signal, which exits 1 at once.
func TestSIGINTIgnoredInABackgroundJob(t *testing.T) {
	g := startGovernorVia(t, []string{"sh", "-c", `trap "" INT; exec "$@"`, "sh"})
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
	lines := g.logLines(t, "draining")
	require.Len(t, lines, 1, g.logs())
	assert.Equal(t, syscall.SIGTERM.String(), lines[0]["signal"], "the drain's signal")
	assert.NotContains(t, g.logs(), "second signal")
}
