package proxy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Calls Governor turns away for want of room are in the log: the first of
// each code at once, at warn level with what to raise, then one line per
// interval with how many more came; other errors are not logged here.
func TestRefusalsAreLoggedInSummary(t *testing.T) {
	var buf bytes.Buffer
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var names Names
	names.withDefaults()
	r := newRefusalLog(slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now }, names)
	for i := range 150 { // 100 ms apart: 15 s
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		r.refused(CodeQueueFull, "default/m/abc")
		r.refused(CodeBadRequest, "default/m/abc")
	}
	r.refused(CodeBuffersFull, "")
	var lines []map[string]any
	for l := range strings.Lines(buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 3, buf.String())
	for _, l := range lines {
		assert.Equal(t, "WARN", l["level"])
		assert.Equal(t, "calls refused", l["msg"])
	}
	assert.Equal(t, CodeQueueFull, lines[0]["code"])
	assert.Contains(t, lines[0]["why"], "Config.QueueCapacity")
	assert.Equal(t, "default/m/abc", lines[0]["lane"], "the lane whose queue is full")
	assert.NotContains(t, lines[0], "more")
	assert.Equal(t, CodeQueueFull, lines[1]["code"])
	assert.EqualValues(t, 99, lines[1]["more"], "the line at 10 s counts the 99 since the first")
	assert.Equal(t, "10s", lines[1]["in"])
	assert.Equal(t, CodeBuffersFull, lines[2]["code"], "each code has its own first line")
	assert.NotContains(t, lines[2], "lane", "refused before it had a lane")
}
