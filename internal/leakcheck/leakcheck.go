// Package leakcheck fails a test that leaves goroutines running: every test
// that starts servers, clients or background work calls Check first, so
// that a goroutine without an owner and a way to stop is caught where it was
// started.
//
// Goroutines are compared by identity (go.uber.org/goleak): a goroutine that
// was running before the check began is never blamed, and one that ends as
// the test ends is waited for, without a fixed wait.
//
// Parallel tests may call Check. Goroutines cannot be told apart by the test
// that started them, so checks that overlap in time share one baseline, taken
// when the first of them began, and the last of them to finish checks for
// every goroutine started since; its failure names the tests of that span. A
// check that begins while that search runs waits for it.
// In a package whose parallel tests start goroutines, each of those tests
// calls Check, after t.Parallel: a check begun before it would stay open
// while the sequential tests run, and hold back their own checks.
package leakcheck

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// background are goroutines that a library starts once per process and
// keeps, or that end on their own a fixed time after their owner stopped.
var background = []goleak.Option{
	// fasthttp's Date header clock, started by the first Server.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// A Server's worker pool cleaner finishes its sleep after Stop.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	// A HostClient's connection cleaner closes idle connections, then ends
	// within MaxIdleConnDuration once the client has none left.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// The goroutines of tests that are still running (parallel tests).
	goleak.IgnoreAnyFunction("testing.tRunner"),
}

// settle bounds the wait for goroutines that are ending as the test ends.
const settle = 10 * time.Second

// span is the set of checks that overlap in time.
var span struct {
	mu       sync.Mutex
	active   int
	baseline goleak.Option // goroutines running when the span began
	tests    []string      // the tests of the span, in order of start
}

// Check fails t if goroutines started during it are still running once
// everything it set up has been cleaned up. Call it first, so that its
// cleanup runs last.
func Check(t testing.TB) {
	t.Helper()
	check(t, settle)
}

// check is Check with the wait for ending goroutines bounded by wait.
func check(t testing.TB, wait time.Duration) {
	t.Helper()
	span.mu.Lock()
	if span.active == 0 {
		span.baseline = goleak.IgnoreCurrent()
		span.tests = span.tests[:0]
	}
	span.active++
	span.tests = append(span.tests, t.Name())
	span.mu.Unlock()

	t.Cleanup(func() {
		span.mu.Lock()
		span.active--
		if span.active > 0 {
			span.mu.Unlock()
			return // the last check of the span checks for this test too
		}
		// Hold the lock while looking, so that no test starts goroutines
		// that this span would blame on its own tests.
		defer span.mu.Unlock()
		tests := strings.Join(span.tests, ", ")
		if err := find(span.baseline, wait); err != nil {
			if strings.Contains(tests, ", ") {
				t.Errorf("goroutines leaked by one of %s: %v", tests, err)
			} else {
				t.Errorf("goroutines leaked: %v", err)
			}
		}
	})
}

// find waits up to wait for the goroutines not in baseline to end.
// goleak.Find itself gives up after about half a second.
func find(baseline goleak.Option, wait time.Duration) error {
	opts := append([]goleak.Option{baseline}, background...)
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
