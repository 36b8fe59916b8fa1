package coord

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Redis that answers near the timeout flaps coordination many times a
// second: the log says the first loss at once, then, once the interval
// has passed, the state then with how many changes came meanwhile,
// instead of a line per change.
func TestFlappingCoordinationIsLoggedInSummary(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now, up := t0, true
	s := &stateLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), instance: "g1",
		now: func() time.Time { return now }, up: func() bool { return up }}
	defer s.close()
	lines := func() []map[string]any {
		var out []map[string]any
		for l := range strings.Lines(buf.String()) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m))
			out = append(out, m)
		}
		return out
	}

	// 25 losses, each restored 25 ms later, every 200 ms: 5 s.
	for i := range 25 {
		now = t0.Add(time.Duration(i) * 200 * time.Millisecond)
		up = false
		s.changed(false, errors.New("i/o timeout"))
		now = now.Add(25 * time.Millisecond)
		up = true
		s.changed(true, nil)
	}
	got := lines()
	require.Len(t, got, 2, "the first loss and its end, at once: %s", buf.String())
	assert.Equal(t, "WARN", got[0]["level"])
	assert.Equal(t, "redis coordination lost: governing locally", got[0]["msg"])
	assert.Equal(t, "i/o timeout", got[0]["err"])
	assert.Equal(t, "INFO", got[1]["level"])
	assert.Equal(t, "redis coordination restored", got[1]["msg"])
	for _, l := range got {
		assert.NotContains(t, l, "flaps")
	}

	// The interval passes (the timer's moment, called here at once): one
	// line, the state now, and the 48 changes not logged.
	now = t0.Add(flapInterval)
	s.settle()
	got = lines()
	require.Len(t, got, 3, buf.String())
	assert.Equal(t, "redis coordination restored", got[2]["msg"])
	assert.EqualValues(t, 48, got[2]["flaps"])
	assert.Equal(t, "10s", got[2]["in"])

	// Calm again: a settle with nothing counted writes nothing, and a
	// loss and its end are logged at once.
	now = now.Add(time.Minute)
	s.settle()
	up = false
	s.changed(false, errors.New("connection refused"))
	now = now.Add(2 * time.Second)
	up = true
	s.changed(true, nil)
	got = lines()
	require.Len(t, got, 5, buf.String())
	assert.Equal(t, "connection refused", got[3]["err"])
	assert.Equal(t, "redis coordination restored", got[4]["msg"])
	assert.NotContains(t, got[3], "flaps")
	assert.NotContains(t, got[4], "flaps")
}
