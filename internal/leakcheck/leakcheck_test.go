package leakcheck

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeT records what check reports, and runs its cleanups on demand.
type fakeT struct {
	testing.TB
	name     string
	cleanups []func()
	errs     []string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Name() string      { return f.name }
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// end runs f's cleanups, last registered first, as testing does.
func (f *fakeT) end() {
	for _, fn := range slices.Backward(f.cleanups) {
		fn()
	}
}

// wait is short: these tests leak on purpose.
const wait = 50 * time.Millisecond

func TestLeftRunningIsReported(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	ft := &fakeT{name: "TestLeaky"}
	check(ft, wait)
	go func() { <-stop }()
	ft.end()
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "leakcheck.TestLeftRunningIsReported")
}

func TestEndingAsTheTestEndsIsWaitedFor(t *testing.T) {
	ft := &fakeT{name: "TestTidy"}
	check(ft, settle)
	stop := make(chan struct{})
	go func() {
		<-stop
		<-time.After(100 * time.Millisecond) // still winding down when the test ends
	}()
	ft.cleanups = append(ft.cleanups, func() { close(stop) })
	ft.end()
	assert.Empty(t, ft.errs)
}

func TestRunningBeforeTheCheckIsNotBlamed(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go func() { <-stop }()
	ft := &fakeT{name: "TestAfter"}
	check(ft, wait)
	ft.end()
	assert.Empty(t, ft.errs)
}

func TestOverlappingChecksReportWhenTheLastEnds(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	a, b := &fakeT{name: "TestA"}, &fakeT{name: "TestB"}
	check(a, wait)
	check(b, wait)
	go func() { <-stop }() // started by one of them
	a.end()
	assert.Empty(t, a.errs, "a check that ends while another runs defers to it")
	b.end()
	require.Len(t, b.errs, 1)
	assert.Contains(t, b.errs[0], "TestA, TestB")
}
