package batch

import (
	"sync"
)

// rowStore keeps the rows of one execution: in memory, or on disk.
type rowStore interface {
	// put stores row i. On error the row is kept all the same (in
	// memory), so that results stay whole.
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

// memRows keeps rows in memory.
type memRows struct {
	mu   sync.Mutex
	rows []Row
	set  []bool
}

func newMemRows(n int) *memRows {
	return &memRows{rows: make([]Row, n), set: make([]bool, n)}
}

func (m *memRows) put(i int, r *Row) error {
	m.mu.Lock()
	m.rows[i], m.set[i] = *r, true
	m.mu.Unlock()
	return nil
}

func (m *memRows) reader() (rowReader, error) { return m, nil }

func (m *memRows) row(i int, _ bool) (Row, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows[i], m.set[i], nil
}

func (m *memRows) Close() error { return nil }
