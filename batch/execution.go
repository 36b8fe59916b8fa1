package batch

import (
	"slices"
	"sync"
	"time"

	"github.com/llmgovernor/governor/proxy"
)

// execution is one run of a batch: its rows fill in as items finish.
type execution struct {
	id      string
	format  Format
	options Options
	total   int
	// items are the requests, until the batch has finished.
	items     []Item
	customIDs []string          // of each item; nil when none has one
	creds     map[string]string // inherited credential headers
	rows      rowStore
	// job reports an async job: at Governor's shutdown it starts no
	// more items, and those under way get until the drain's end to
	// finish (sync batches are their clients' calls and run on).
	job bool
	// resumable reports rows kept on disk: a run stopped by Governor's
	// shutdown is resumed after a restart rather than finished.
	resumable bool
	// prior counts, for an item of a resumed job whose row was never
	// recorded, the attempts sent in the runs before (read-only once the
	// job runs; see withPrior).
	prior map[int]int
	// onRow, if set, is called once per row as it is recorded, from the
	// goroutine that recorded it, without locks held.
	onRow func(i int, r *Row)
	// onRecord, if set, is called like onRow: the access log's hook.
	onRecord func(i int, r *Row)
	// onStoreError, if set, is called when a row could not be stored
	// (it is then kept in memory).
	onStoreError func(err error)

	mu       sync.Mutex
	done     []bool
	summary  Summary
	started  time.Time
	finished time.Time
	// stalled counts the rows waiting for the batch directory to take
	// them, and stallErr says why (see Server.store).
	stalled  int
	stallErr string
}

func newExecution(id string, b *Batch, creds map[string]string) *execution {
	e := &execution{id: id, format: b.Format, options: b.Options, total: len(b.Items),
		items: b.Items, customIDs: customIDs(b.Items), creds: creds,
		done: make([]bool, len(b.Items)), summary: Summary{Total: len(b.Items)}}
	e.rows = newMemRows(e.total, nil)
	return e
}

// customIDs returns the items' custom ids, nil if none has one.
func customIDs(items []Item) []string {
	var ids []string
	for i := range items {
		if items[i].CustomID != "" && ids == nil {
			ids = make([]string, len(items))
		}
		if ids != nil {
			ids[i] = items[i].CustomID
		}
	}
	return ids
}

func (e *execution) customID(i int) string {
	if e.customIDs == nil {
		return ""
	}
	return e.customIDs[i]
}

// record stores row i.
func (e *execution) record(i int, r Row) {
	if err := e.rows.put(i, &r); err != nil && e.onStoreError != nil {
		e.onStoreError(err)
	}
	e.recorded(i, r)
}

// laterRows is a rowStore that can store a row without waiting for the
// disk: the next row stored with put, or the job's end, makes it durable.
type laterRows interface {
	putLater(i int, r *Row) error
}

// recordLater is record for a row that need not be on disk before the
// next: those of the items a stopped job never ran, written one after the
// other, with one sync for all of them at the job's end.
func (e *execution) recordLater(i int, r Row) {
	lr, ok := e.rows.(laterRows)
	if !ok {
		e.record(i, r)
		return
	}
	if err := lr.putLater(i, &r); err != nil && e.onStoreError != nil {
		e.onStoreError(err)
	}
	e.recorded(i, r)
}

// recorded accounts for row i, stored.
func (e *execution) recorded(i int, r Row) {
	e.mu.Lock()
	e.done[i] = true
	e.summary.add(r.Status)
	e.mu.Unlock()
	if e.onRow != nil {
		e.onRow(i, &r)
	}
	if e.onRecord != nil {
		e.onRecord(i, &r)
	}
}

// pending returns how many of e's items have no row yet.
func (e *execution) pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.summary
	return e.total - s.Completed - s.CompletedWithRetries - s.Failed - s.DidNotRun
}

// pendingOf returns how many items of es have no row yet.
func pendingOf(es []*execution) int {
	n := 0
	for _, e := range es {
		n += e.pending()
	}
	return n
}

func (e *execution) isDone(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done[i]
}

// progress returns which rows are recorded and the summary, as of now.
func (e *execution) progress(now time.Time) ([]bool, Summary) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.done), e.summaryLocked(now)
}

// summaryLocked requires e.mu to be held.
func (e *execution) summaryLocked(now time.Time) Summary {
	s := e.summary
	end := e.finished
	if end.IsZero() {
		end = now
	}
	if !e.started.IsZero() {
		s.WallSeconds = round3(end.Sub(e.started).Seconds())
	}
	return s
}

func (e *execution) snapshotSummary(now time.Time) Summary {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.summaryLocked(now)
}

// allDone reports whether every row is recorded.
func (e *execution) allDone() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !slices.Contains(e.done, false)
}

// finish records DID_NOT_RUN for the items that never ran, and the end;
// stopped says why the run ended early, empty if it did not.
func (e *execution) finish(stopped string, now time.Time) {
	for i := range e.total {
		if !e.isDone(i) {
			r := Row{Status: proxy.StatusDidNotRun}
			e.withPrior(i, &r)
			e.recordLater(i, r)
		}
	}
	e.mu.Lock()
	e.finished = now
	e.summary.Stopped = stopped
	e.mu.Unlock()
}

// errSentBeforeRestart is the error of an attempt sent in a run that a
// crash or a shutdown ended before the item's row was recorded.
const errSentBeforeRestart = "sent before a restart: its answer was not recorded"

// withPrior adds to row i the attempts that its item made in the runs of
// the job before a restart, which a crash or a shutdown ended before the
// row was recorded: they count in Attempts (so a row tells every send the
// provider may bill), one error each, and a row COMPLETED in this run is
// COMPLETED_WITH_RETRIES.
func (e *execution) withPrior(i int, r *Row) {
	n := e.prior[i]
	if n == 0 {
		return
	}
	r.Attempts += n
	r.AttemptsBeforeRestart = n
	errs := make([]string, n, n+len(r.Errors))
	for k := range errs {
		errs[k] = errSentBeforeRestart
	}
	r.Errors = append(errs, r.Errors...)
	if r.Status == proxy.StatusCompleted {
		r.Status = proxy.StatusCompletedWithRetries
	}
}
