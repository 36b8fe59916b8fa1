package batch

import (
	"errors"
	"fmt"
	"sync"

	"github.com/llmgovernor/governor/proxy"
)

// rowStore keeps the rows of one execution: in memory, or on disk.
type rowStore interface {
	// put stores row i. It may change the row first (an answer that does
	// not fit in memory is dropped, the row FAILED). On error the row is
	// kept all the same (in memory), so that results stay whole.
	put(i int, r *Row) error
	// reader returns a reader of the rows stored so far and later.
	reader() (rowReader, error)
}

// rowReader reads rows back one at a time.
type rowReader interface {
	// row returns row i, its Body only when body is true; ok is false
	// when row i is not stored.
	row(i int, body bool) (r Row, ok bool, err error)
	Close() error
}

// memRows keeps rows in memory; with a budget, their answers count
// against it until release.
type memRows struct {
	budget *resultBudget // nil: unbounded

	mu   sync.Mutex
	rows []Row
	set  []bool
	held int64 // answer bytes taken from budget
}

func newMemRows(n int, budget *resultBudget) *memRows {
	return &memRows{budget: budget, rows: make([]Row, n), set: make([]bool, n)}
}

func (m *memRows) put(i int, r *Row) error {
	if n := int64(len(r.Body)); n > 0 && m.budget != nil {
		if m.budget.take(n) {
			m.mu.Lock()
			m.held += n
			m.mu.Unlock()
		} else {
			dropAnswer(r, m.budget)
		}
	}
	m.mu.Lock()
	m.rows[i], m.set[i] = *r, true
	m.mu.Unlock()
	return nil
}

// release gives the rows' answer bytes back to the budget; the rows are
// not to be read afterwards.
func (m *memRows) release() {
	m.mu.Lock()
	n := m.held
	m.held = 0
	m.rows = nil
	m.mu.Unlock()
	if m.budget != nil {
		m.budget.give(n)
	}
}

func (m *memRows) reader() (rowReader, error) { return m, nil }

func (m *memRows) row(i int, _ bool) (Row, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == nil {
		return Row{}, false, fmt.Errorf("results released")
	}
	return m.rows[i], m.set[i], nil
}

func (m *memRows) Close() error { return nil }

// sentRows keeps no row: a progress answer sends each row as it is
// recorded, and nothing reads them back.
type sentRows struct{}

func (sentRows) put(int, *Row) error { return nil }

func (sentRows) reader() (rowReader, error) {
	return nil, errors.New("the rows of a progress answer are not kept")
}

// codeResultsFull is the error of an item whose answer was dropped because
// the answers held in memory reached their bound.
const codeResultsFull = "results_memory_full"

// dropAnswer turns a row whose answer b had no room for into a FAILED row
// that says why.
func dropAnswer(r *Row, b *resultBudget) {
	msg := fmt.Sprintf("the answer (%d bytes, status %d) was not kept: batches hold %d bytes of answers in memory at most (%s); progress lines (Accept: application/x-ndjson) keep none, and %s keeps async jobs' results on disk",
		len(r.Body), r.StatusCode, b.max, b.names.MaxResultBytes, b.names.Dir)
	*r = Row{Status: proxy.StatusFailed, Attempts: r.Attempts, Queue: r.Queue, Execution: r.Execution, Lane: r.Lane,
		Errors: append(r.Errors, codeResultsFull),
		Err:    &proxy.Error{Status: 507, Code: codeResultsFull, Message: msg}}
}

// resultBudget bounds the answer bytes that batches hold in memory, all
// together (async jobs without a batch directory, sync batches until
// their answer is written). When an answer does not fit, evict is called to
// forget a finished job (see Server.evictFinished), until it fits or there
// is none left.
type resultBudget struct {
	max   int64
	names Names // in the error of an answer dropped
	evict func() bool

	mu   sync.Mutex
	held int64
}

// take reserves n bytes, evicting finished jobs if needed; false if they
// cannot be had.
func (b *resultBudget) take(n int64) bool {
	if n > b.max {
		return false
	}
	for {
		b.mu.Lock()
		if b.held+n <= b.max {
			b.held += n
			b.mu.Unlock()
			return true
		}
		b.mu.Unlock()
		if !b.evict() {
			return false
		}
	}
}

func (b *resultBudget) give(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}

// full reports whether no room is left after evicting what can be.
func (b *resultBudget) full() bool {
	for {
		b.mu.Lock()
		held := b.held
		b.mu.Unlock()
		if held < b.max {
			return false
		}
		if !b.evict() {
			return true
		}
	}
}

func (b *resultBudget) bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}
