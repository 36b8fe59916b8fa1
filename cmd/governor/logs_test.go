package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/llmgovernor/governor/mockllm"
)

// logLines returns the Governor's JSON log lines whose msg is msg.
func (g *governorProcess) logLines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(g.logs()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// The start-up line shows what is in effect: under -demo, the simulated
// provider as the upstream; the controller's preset defaults instead of 0;
// the batch window that GOVERNOR_BATCH_WINDOW=0 means; the log format that
// "auto" chose (JSON: stderr is not a terminal here).
func TestStartupLineShowsTheConfigurationInEffect(t *testing.T) {
	// The shell runs the binary, its $0, with -demo.
	g := startGovernorVia(t, []string{"sh", "-c", `exec "$0" -demo`}, "GOVERNOR_MAX_CONCURRENCY=32")
	lines := g.logLines(t, "governor started")
	require.Len(t, lines, 1, g.logs())
	cfg := lines[0]["config"].(map[string]any)
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+$`, cfg["GOVERNOR_UPSTREAM"])
	assert.Regexp(t, `^anthropic=http://127\.0\.0\.1:\d+$`, cfg["GOVERNOR_ROUTES"])
	assert.EqualValues(t, 8, cfg["GOVERNOR_AIMD_INITIAL"])
	assert.EqualValues(t, 1, cfg["GOVERNOR_AIMD_INCREASE_STEP"])
	assert.EqualValues(t, 0.9, cfg["GOVERNOR_AIMD_DECREASE_RATIO"])
	assert.EqualValues(t, 1.25, cfg["GOVERNOR_AIMD_LATENCY_TOLERANCE"])
	assert.EqualValues(t, 64, cfg["GOVERNOR_BATCH_WINDOW"])
	assert.Equal(t, "json", cfg["GOVERNOR_LOG_FORMAT"])
	assert.Equal(t, false, cfg["GOVERNOR_ACCESS_LOG"])
}

// GOVERNOR_ACCESS_LOG=true writes a line per call even at
// GOVERNOR_LOG_LEVEL=warn; without it, a call writes nothing.
func TestAccessLogVariable(t *testing.T) {
	g := startQuietDemo(t, "GOVERNOR_ACCESS_LOG=true", "GOVERNOR_LOG_LEVEL=warn")
	require.NoError(t, complete(call(g.base, false, 1), false))
	require.NoError(t, completeBatch(runBatch(g.base, 2), 2))
	require.Eventually(t, func() bool { return len(g.logLines(t, "call")) == 1 && len(g.logLines(t, "batch item")) == 2 },
		5*time.Second, 5*time.Millisecond, g.logs())
	assert.Empty(t, g.logLines(t, "governor started"), "an info line at GOVERNOR_LOG_LEVEL=warn")
	line := g.logLines(t, "call")[0]
	assert.Equal(t, "/v1/chat/completions", line["path"])
	assert.Equal(t, "COMPLETED", line["status"])

	_, mockURL := startMock(t, mockllm.Config{})
	quiet := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL)
	require.NoError(t, complete(call(quiet.base, false, 1), false))
	require.NoError(t, completeBatch(runBatch(quiet.base, 2), 2))
	assert.Empty(t, quiet.logLines(t, "call"))
	assert.Empty(t, quiet.logLines(t, "batch item"))
}

// startQuietDemo starts governor -demo at a log level that leaves out its
// start-up line, so the test learns its main listener's address from the
// demo's banner on stdout (written once the listeners are bound); the
// admin listener's stays unknown.
func startQuietDemo(t *testing.T, env ...string) *governorProcess {
	t.Helper()
	bin, err := buildGovernor()
	require.NoError(t, err)
	g := launchGovernor(t, bin, []string{"sh", "-c", `exec "$0" -demo`}, env)
	banner := regexp.MustCompile(`behind Governor on http://(\S+)\.`)
	require.Eventually(t, func() bool {
		g.stdout.mu.Lock()
		m := banner.FindStringSubmatch(g.stdout.w.(*bytes.Buffer).String())
		g.stdout.mu.Unlock()
		if m != nil {
			g.base = m[1]
		}
		return !g.alive() || m != nil
	}, 20*time.Second, 10*time.Millisecond, "governor -demo never wrote its banner")
	require.True(t, g.alive(), "governor exited at start-up; its stderr:\n%s", g.logs())
	return g
}

// "auto" picks text for a terminal only: a pseudo-terminal is one; a pipe,
// a file and /dev/null are not.
func TestIsTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
	_ = unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0)
	assert.True(t, isTerminal(ptmx))

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	assert.False(t, isTerminal(w))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.False(t, isTerminal(null))
	assert.False(t, isTerminal(&strings.Builder{}))
}
