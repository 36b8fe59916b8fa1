package batch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch/journal"
	"github.com/llmgovernor/governor/proxy"
)

// A row the journal cannot take (its file closed, as on a disk that
// fails) is kept in memory: put reports the error and the row still reads
// back, body included.
func TestDiskRowsKeepWhatTheJournalCannotTake(t *testing.T) {
	d, err := journal.Open(t.TempDir())
	require.NoError(t, err)
	defer d.Close()
	jj, err := d.Create("j", 2, nil, nil, nil)
	require.NoError(t, err)
	e := &execution{total: 2}
	rows := newDiskRows(jj, e)

	require.NoError(t, rows.put(0, &Row{Status: proxy.StatusCompleted, StatusCode: 200, Body: []byte(`{"a":1}`)}))
	jj.Close()
	err = rows.put(1, &Row{Status: proxy.StatusCompleted, StatusCode: 200, Body: []byte(`{"b":2}`)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "item 1 kept in memory")

	rr, err := rows.reader()
	require.NoError(t, err)
	defer rr.Close()
	for i, want := range []string{`{"a":1}`, `{"b":2}`} {
		r, ok, err := rr.row(i, true)
		require.NoError(t, err)
		require.True(t, ok, "row %d", i)
		assert.Equal(t, want, string(r.Body), "row %d", i)
		assert.Equal(t, proxy.StatusCompleted, r.Status)
	}
}

// The budget evicts finished jobs, oldest first, until an answer fits,
// and refuses one larger than the whole bound without evicting anything.
func TestResultBudget(t *testing.T) {
	var evicted int
	b := &resultBudget{max: 100}
	b.evict = func() bool {
		if evicted == 2 {
			return false
		}
		evicted++
		b.give(40)
		return true
	}
	require.True(t, b.take(80))
	assert.False(t, b.take(101), "larger than the bound")
	assert.Zero(t, evicted)
	require.True(t, b.take(50), "one eviction makes room")
	assert.Equal(t, 1, evicted)
	assert.Equal(t, int64(90), b.bytes())
	assert.False(t, b.take(100), "evicts what it can, then gives up")
	assert.Equal(t, 2, evicted)
	assert.Equal(t, int64(50), b.bytes())
	assert.False(t, b.full(), "half empty")
}
