// Package leakcheck fails a test that leaves goroutines running: every test
// that starts servers, clients or background work calls Check first, so
// that a goroutine without an owner and a way to stop is caught where it was
// started.
package leakcheck

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// processWide are goroutines a library starts once per process and keeps,
// or that end on their own a fixed time after their owner stopped
// (fasthttp's worker pool cleaner finishes its 10s sleep after Stop).
var processWide = []string{"fasthttp.updateServerDate", "fasthttp.(*workerPool).Start.func2"}

// settle bounds the wait for goroutines that are ending as the test ends.
const settle = 10 * time.Second

// Check fails t if goroutines started during it are still running once
// everything it set up has been cleaned up. Call it first, so that its
// cleanup runs last.
func Check(t testing.TB) {
	t.Helper()
	base, _ := Goroutines()
	t.Cleanup(func() {
		deadline := time.Now().Add(settle)
		n, stacks := Goroutines()
		for n > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling for goroutines to end, not papering over a race
			n, stacks = Goroutines()
		}
		if n > base {
			t.Errorf("%d goroutines leaked:\n%s", n-base, stacks)
		}
	})
}

// Goroutines counts the running goroutines, process-wide ones excepted, and
// returns their stacks.
func Goroutines() (int, string) {
	buf := make([]byte, 4<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	n := 0
	var kept []string
next:
	for g := range strings.SplitSeq(all, "\n\n") {
		for _, skip := range processWide {
			if strings.Contains(g, skip) {
				continue next
			}
		}
		n++
		kept = append(kept, g)
	}
	return n, strings.Join(kept, "\n\n")
}
