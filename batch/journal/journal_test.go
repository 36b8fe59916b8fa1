package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func open(t *testing.T, path string) *Dir {
	t.Helper()
	d, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// load opens path afresh and loads it, closing it when the test ends.
func load(t *testing.T, path string) ([]Loaded, []*Damage) {
	t.Helper()
	return open(t, path).Load()
}

// small is a short body, for tests that reopen a journal many times.
func small(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 3+i) }

func body(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*37) }

func TestCreatePutLoadGet(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	j, err := d.Create("job_1", 4, []byte("hdr"), []byte("input"), []byte("secret"))
	require.NoError(t, err)
	for _, i := range []int{2, 0, 3} {
		require.NoError(t, j.Put(i, fmt.Appendf(nil, "meta%d", i), body(i)))
	}
	require.NoError(t, d.Close())

	jobs, damage := load(t, path)
	require.Empty(t, damage)
	require.Len(t, jobs, 1)
	l := jobs[0]
	assert.Equal(t, "job_1", l.Job.ID())
	assert.Equal(t, 4, l.Job.Total())
	assert.Equal(t, []byte("hdr"), l.Header)
	assert.Equal(t, []byte("input"), l.Input)
	assert.Equal(t, []byte("secret"), l.Secret)
	assert.Nil(t, l.Finished)
	assert.Equal(t, []Result{{2, []byte("meta2")}, {0, []byte("meta0")}, {3, []byte("meta3")}}, l.Results)

	r, err := l.Job.Open()
	require.NoError(t, err)
	defer r.Close()
	for _, i := range []int{0, 2, 3} {
		meta, b, ok, err := r.Get(i)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, fmt.Sprintf("meta%d", i), string(meta))
		assert.Equal(t, body(i), b)
		meta, ok, err = r.Meta(i)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, fmt.Sprintf("meta%d", i), string(meta))
	}
	_, _, ok, err := r.Get(1)
	require.NoError(t, err)
	assert.False(t, ok, "item 1 has no result")

	// Results recorded after a reload follow the loaded ones.
	require.NoError(t, l.Job.Put(1, []byte("meta1"), body(1)))
	meta, b, ok, err := r.Get(1)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "meta1", string(meta))
	assert.Equal(t, body(1), b)
}

func TestFinishRemovesSecretAndStopsWrites(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	j, err := d.Create("j", 1, nil, []byte("in"), []byte("key"))
	require.NoError(t, err)
	require.NoError(t, j.Cancel())
	require.NoError(t, j.Put(0, []byte("m"), nil))
	require.NoError(t, j.Finish([]byte("done")))
	assert.NoFileExists(t, filepath.Join(path, jobsName, "j", secretFile))
	assert.ErrorIs(t, j.Put(0, []byte("m"), nil), ErrFinished)
	require.NoError(t, d.Close())
	// As a crash between Finish's record and the secret's removal leaves it.
	require.NoError(t, writeFileFrame(filepath.Join(path, jobsName, "j", secretFile), []byte("key")))

	jobs, damage := load(t, path)
	require.Empty(t, damage)
	require.Len(t, jobs, 1)
	assert.True(t, jobs[0].Cancelled)
	assert.Equal(t, []byte("done"), jobs[0].Finished)
	assert.Nil(t, jobs[0].Input, "a finished job's input is not read")
	assert.Nil(t, jobs[0].Secret)
	assert.NoFileExists(t, filepath.Join(path, jobsName, "j", secretFile), "a finished job's leftover secret is removed")
}

func TestRemove(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	j, err := d.Create("j", 1, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, j.Put(0, []byte("m"), []byte("b")))
	r, err := j.Open()
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, d.Remove(j))
	assert.NoDirExists(t, filepath.Join(path, jobsName, "j"))
	_, b, ok, err := r.Get(0)
	require.NoError(t, err)
	assert.True(t, ok && string(b) == "b", "an open reader reads on")
	assert.Error(t, j.Put(0, nil, nil))
	jobs, _ := d.Load()
	assert.Empty(t, jobs)
}

func TestLockedByAnotherOpen(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	_, err := Open(path)
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d", os.Getpid()))
	require.NoError(t, d.Close())
	d2, err := Open(path)
	require.NoError(t, err, "free again once closed")
	d2.Close()
}

func TestConcurrentPuts(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	const n = 200
	j, err := d.Create("j", n, nil, nil, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				assert.NoError(t, j.Put(i, fmt.Appendf(nil, "%d", i), body(i)))
			}
		})
	}
	wg.Wait()
	require.NoError(t, d.Close())
	jobs, damage := load(t, path)
	require.Empty(t, damage)
	require.Len(t, jobs[0].Results, n)
	r, err := jobs[0].Job.Open()
	require.NoError(t, err)
	defer r.Close()
	for i := range n {
		meta, b, ok, err := r.Get(i)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, fmt.Sprint(i), string(meta))
		assert.Equal(t, body(i), b)
	}
}

// A journal cut at any byte keeps exactly the records that end before the
// cut, and takes new records after them.
func TestJournalCutAtEveryByte(t *testing.T) {
	src := t.TempDir()
	d, err := Open(src)
	require.NoError(t, err)
	const n = 4
	j, err := d.Create("j", n, []byte("h"), []byte("in"), []byte("s"))
	require.NoError(t, err)
	var ends []int64 // journal size after each record
	for i := range n {
		require.NoError(t, j.Put(i, []byte{byte('0' + i)}, small(i)))
		ends = append(ends, j.size)
	}
	require.NoError(t, j.Cancel())
	ends = append(ends, j.size)
	require.NoError(t, d.Close())
	journal, err := os.ReadFile(filepath.Join(src, jobsName, "j", journalFile))
	require.NoError(t, err)

	for cut := range int64(len(journal)) {
		path := t.TempDir()
		require.NoError(t, os.CopyFS(path, os.DirFS(src)))
		require.NoError(t, os.Truncate(filepath.Join(path, jobsName, "j", journalFile), cut))
		d, err := Open(path)
		require.NoError(t, err)
		jobs, damage := d.Load()
		require.Len(t, jobs, 1, "cut at %d", cut)
		kept := 0
		for kept < len(ends) && ends[kept] <= cut {
			kept++
		}
		want := min(kept, n)
		require.Len(t, jobs[0].Results, want, "cut at %d", cut)
		assert.Equal(t, kept == len(ends), jobs[0].Cancelled, "cut at %d", cut)
		var whole int64
		if kept > 0 {
			whole = ends[kept-1]
		}
		if cut > whole {
			require.Len(t, damage, 1, "cut at %d", cut)
			assert.False(t, damage[0].Lost)
			assert.Equal(t, cut-whole, damage[0].DroppedBytes)
		} else {
			assert.Empty(t, damage, "cut at %d", cut)
		}
		// The job takes new results after the whole records.
		jb := jobs[0].Job
		for i := want; i < n; i++ {
			require.NoError(t, jb.Put(i, []byte{byte('0' + i)}, small(i)))
		}
		require.NoError(t, d.Close())
		d, err = Open(path)
		require.NoError(t, err)
		jobs, damage = d.Load()
		require.Empty(t, damage, "cut at %d, after repair", cut)
		require.Len(t, jobs[0].Results, n, "cut at %d, after repair", cut)
		r, err := jobs[0].Job.Open()
		require.NoError(t, err)
		for i := range n {
			_, b, ok, err := r.Get(i)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, small(i), b, "cut at %d: item %d", cut, i)
		}
		r.Close()
		d.Close()
	}
}

// A job whose header, input or secret is cut is moved aside and reported
// lost; the other jobs load.
func TestDamagedJobFilesAreMovedAside(t *testing.T) {
	for _, file := range []string{headerFile, inputFile, secretFile} {
		t.Run(file, func(t *testing.T) {
			path := t.TempDir()
			d, err := Open(path)
			require.NoError(t, err)
			_, err = d.Create("a", 1, []byte("hdr"), []byte("input"), []byte("secret"))
			require.NoError(t, err)
			_, err = d.Create("b", 1, []byte("hdr"), []byte("input"), []byte("secret"))
			require.NoError(t, err)
			require.NoError(t, d.Close())
			f := filepath.Join(path, jobsName, "a", file)
			st, err := os.Stat(f)
			require.NoError(t, err)
			for cut := st.Size() - 1; cut >= 0; cut-- {
				require.NoError(t, os.Truncate(f, cut))
				_, err := readFileFrame(f)
				require.ErrorIs(t, err, errDamaged, "cut at %d", cut)
			}
			jobs, damage := load(t, path)
			require.Len(t, jobs, 1)
			assert.Equal(t, "b", jobs[0].Job.ID())
			require.Len(t, damage, 1)
			assert.True(t, damage[0].Lost)
			assert.Contains(t, damage[0].Error(), "batch job a lost: "+file)
			assert.DirExists(t, filepath.Join(path, damagedName, "a"))
			assert.NoFileExists(t, filepath.Join(path, damagedName, "a", secretFile), "no secret is kept aside")
		})
	}
}

func TestLeftoversOfACrashAreRemoved(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	require.NoError(t, os.MkdirAll(filepath.Join(path, jobsName, ".new-x"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(path, jobsName, ".del-y"), 0o700))
	jobs, damage := d.Load()
	assert.Empty(t, jobs)
	assert.Empty(t, damage)
	assert.NoDirExists(t, filepath.Join(path, jobsName, ".new-x"))
	assert.NoDirExists(t, filepath.Join(path, jobsName, ".del-y"))
}

func TestBadIDs(t *testing.T) {
	d := open(t, t.TempDir())
	for _, id := range []string{"", "../x", "a/b", ".hidden"} {
		_, err := d.Create(id, 1, nil, nil, nil)
		assert.Error(t, err, id)
	}
	_, err := d.Create("ok", 1, nil, nil, nil)
	require.NoError(t, err)
	_, err = d.Create("ok", 1, nil, nil, nil)
	assert.Error(t, err, "exists")
	var dmg *Damage
	assert.False(t, errors.As(err, &dmg))
}

// LoadEach hands over each job before it reads the next: memory holds one
// job's results at a time. Job b's journal, cut while job a is handed
// over, is read cut.
func TestLoadEachReadsOneJobAtATime(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	for _, id := range []string{"a", "b"} {
		j, err := d.Create(id, 2, nil, []byte("in"), []byte("sec"))
		require.NoError(t, err)
		require.NoError(t, j.Put(0, []byte("m"), small(0)))
		require.NoError(t, j.Put(1, []byte("m"), small(1)))
		j.Close()
	}
	require.NoError(t, d.Close())

	var got []string
	damage := open(t, path).LoadEach(func(l Loaded) {
		got = append(got, fmt.Sprintf("%s:%d", l.Job.ID(), len(l.Results)))
		if l.Job.ID() == "a" {
			require.NoError(t, os.Truncate(filepath.Join(path, jobsName, "b", journalFile), 0))
		}
		l.Job.Close()
	})
	assert.Empty(t, damage)
	assert.Equal(t, []string{"a:2", "b:0"}, got)
}

// Attempts noted as sent count, after a restart, for the items whose
// result was not recorded, and only for them; a sent file cut at any byte
// keeps the counts of the whole records before the cut, and takes new ones
// after them.
func TestSentCountsAttemptsOfItemsWithoutAResult(t *testing.T) {
	src := t.TempDir()
	d, err := Open(src)
	require.NoError(t, err)
	j, err := d.Create("j", 3, []byte("h"), []byte("in"), []byte("s"))
	require.NoError(t, err)
	for _, i := range []int{0, 1, 0} {
		require.NoError(t, j.Sent(i))
	}
	require.NoError(t, j.Put(0, []byte("m"), small(0))) // item 0's result counts its attempts
	for _, i := range []int{1, 2} {
		require.NoError(t, j.Sent(i))
	}
	assert.Error(t, j.Sent(3), "out of range")
	require.NoError(t, d.Close())
	sentPath := filepath.Join(src, jobsName, "j", sentFile)
	sent, err := os.ReadFile(sentPath)
	require.NoError(t, err)
	require.Len(t, sent, 5*sentRecord)
	// Whole records kept at each cut, and the counts they give.
	wants := []map[int]int{nil, nil, {1: 1}, {1: 1}, {1: 2}, {1: 2, 2: 1}}

	for cut := range int64(len(sent)) + 1 {
		path := t.TempDir()
		require.NoError(t, os.CopyFS(path, os.DirFS(src)))
		p := filepath.Join(path, jobsName, "j", sentFile)
		require.NoError(t, os.Truncate(p, cut))
		jobs, damage := load(t, path)
		require.Len(t, jobs, 1, "cut at %d", cut)
		assert.Empty(t, damage, "cut at %d: a count of attempts is not worth reporting", cut)
		want := wants[cut/sentRecord]
		if want == nil {
			assert.Empty(t, jobs[0].Sent, "cut at %d", cut)
		} else {
			assert.Equal(t, want, jobs[0].Sent, "cut at %d", cut)
		}
		// New notes follow the whole records.
		require.NoError(t, jobs[0].Job.Sent(2))
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, (cut/sentRecord+1)*sentRecord, st.Size(), "cut at %d", cut)
	}

	// Finished, the job's results count every attempt: the notes go.
	jobs, _ := load(t, src)
	require.NoError(t, jobs[0].Job.Finish([]byte("end")))
	assert.NoFileExists(t, sentPath)
}

// Results put without waiting for the disk read back like the others, at
// once and after a restart, and a later Put or Finish makes them durable
// with its own sync.
func TestPutAsyncReadsBackLikePut(t *testing.T) {
	path := t.TempDir()
	d := open(t, path)
	j, err := d.Create("j", 3, []byte("h"), []byte("in"), []byte("s"))
	require.NoError(t, err)
	require.NoError(t, j.PutAsync(0, []byte("m0"), small(0)))
	require.NoError(t, j.PutAsync(2, []byte("m2"), small(2)))
	assert.Less(t, j.synced, j.size, "not synced yet")
	r, err := j.Open()
	require.NoError(t, err)
	meta, b, ok, err := r.Get(2)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []byte("m2"), meta)
	assert.Equal(t, small(2), b)
	require.NoError(t, r.Close())
	require.NoError(t, j.Finish([]byte("end")))
	assert.Equal(t, j.size, j.synced, "Finish's sync covers them")
	require.NoError(t, d.Close())

	jobs, damage := load(t, path)
	require.Empty(t, damage)
	require.Len(t, jobs, 1)
	assert.Equal(t, []Result{{0, []byte("m0")}, {2, []byte("m2")}}, jobs[0].Results)
	assert.Equal(t, []byte("end"), jobs[0].Finished)
}
