// Package logtest collects the JSON log lines a test's logger writes, from
// any goroutine, and reads them back by message.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is an io.Writer for slog.NewJSONHandler that is safe for
// concurrent use. The zero value is empty and ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far whose "msg" is msg, decoded. A
// line that is not JSON fails t.
func (b *Buffer) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
