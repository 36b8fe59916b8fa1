package main

import (
	"bytes"
	"net"
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
	closed := freeAddr(t) // nobody listens: Redis is down, Governor governs alone
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
