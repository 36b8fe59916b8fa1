package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis.
	line := "4242 (my (proc) x) S 17 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 100 1000000 500 18446744073709551615"
	cpu, ppid, err := parseStat([]byte(line))
	require.NoError(t, err)
	assert.Equal(t, 17, ppid)
	assert.Equal(t, 3250*time.Millisecond, cpu, "(250 + 75) ticks of 10 ms")

	_, _, err = parseStat([]byte("12 (short) S 1 2"))
	assert.Error(t, err)
}

func TestParseStatus(t *testing.T) {
	text := "Name:\tgovernor\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n"
	rss, hwm, err := parseStatus([]byte(text))
	require.NoError(t, err)
	assert.Equal(t, int64(10<<20), rss)
	assert.Equal(t, int64(20<<20), hwm)

	_, _, err = parseStatus([]byte("Name:\tkthread\n"))
	assert.Error(t, err, "kernel threads have no VmRSS")
}

func TestReadUsageSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	u, err := readUsage(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, u.RSS)
	assert.GreaterOrEqual(t, u.HWM, u.RSS)
}

func TestParseMachineBusy(t *testing.T) {
	busy, err := parseMachineBusy("cpu  100 5 50 9999 77 3 2 40 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	require.NoError(t, err)
	assert.Equal(t, 2000*time.Millisecond, busy, "(100+5+50+3+2+40) ticks; idle and iowait left out")

	_, err = parseMachineBusy("intr 1 2 3\n")
	assert.Error(t, err)
}
