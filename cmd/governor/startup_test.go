package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
)

// A start-up that fails once the proxy runs (its coordinator's sync loop
// included) stops what it started: nothing is left running in the process.
func TestFailedStartupStopsWhatItStarted(t *testing.T) {
	leakcheck.Check(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	closed := "127.0.0.1:1" // nobody listens (tcpmux): Redis is down, Governor governs alone
	var out, errOut bytes.Buffer
	code := run(nil, []string{
		"GOVERNOR_LISTEN=127.0.0.1:0",
		"GOVERNOR_ADMIN_LISTEN=" + taken.Addr().String(),
		"GOVERNOR_REDIS_URL=redis://" + closed,
		"GOVERNOR_UPSTREAM=http://127.0.0.1:9",
	}, &out, &errOut)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut.String(), "GOVERNOR_ADMIN_LISTEN")
}

// A batch directory that cannot be made (here under a regular file; a
// read-only volume is the same) stops the start-up with an error that
// names the variable, the path and why.
func TestUnusableBatchDirectoryStopsTheStartup(t *testing.T) {
	leakcheck.Check(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	dir := filepath.Join(file, "batches")
	var out, errOut bytes.Buffer
	code := run(nil, []string{
		"GOVERNOR_LISTEN=127.0.0.1:0",
		"GOVERNOR_ADMIN_LISTEN=127.0.0.1:0",
		"GOVERNOR_UPSTREAM=http://127.0.0.1:9",
		"GOVERNOR_BATCH_DIR=" + dir,
	}, &out, &errOut)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut.String(), "GOVERNOR_BATCH_DIR="+dir+": batch directory: mkdir "+file+": not a directory")
}
