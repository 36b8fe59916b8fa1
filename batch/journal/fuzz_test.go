package journal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Whatever bytes a journal holds, Load keeps the job and only records that
// check, and every result it reports reads back.
func FuzzLoadJournal(f *testing.F) {
	seed := f.TempDir()
	d, err := Open(seed)
	require.NoError(f, err)
	j, err := d.Create("j", 4, nil, []byte("in"), []byte("s"))
	require.NoError(f, err)
	require.NoError(f, j.Put(1, []byte(`{"status":"COMPLETED"}`), []byte("answer")))
	require.NoError(f, j.Put(3, nil, nil))
	require.NoError(f, j.Cancel())
	require.NoError(f, j.Finish([]byte("end")))
	require.NoError(f, d.Close())
	whole, err := os.ReadFile(filepath.Join(seed, jobsName, "j", journalFile))
	require.NoError(f, err)
	f.Add(whole)
	f.Add(whole[:len(whole)/2])
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})

	f.Fuzz(func(t *testing.T, journal []byte) {
		path := t.TempDir()
		d, err := Open(path)
		require.NoError(t, err)
		defer d.Close()
		_, err = d.Create("j", 4, nil, []byte("in"), []byte("s"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(path, jobsName, "j", journalFile), journal, 0o600))

		jobs, damage := d.Load()
		require.Len(t, jobs, 1, "a journal never loses the job")
		for _, dmg := range damage {
			require.False(t, dmg.Lost)
		}
		r, err := jobs[0].Job.Open()
		require.NoError(t, err)
		defer r.Close()
		for _, res := range jobs[0].Results {
			_, _, ok, err := r.Get(res.Index)
			require.NoError(t, err, "item %d", res.Index)
			require.True(t, ok)
		}
	})
}
