package journal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Loaded is a job found on disk by Load.
type Loaded struct {
	Job    *Job
	Header []byte // as given to Create
	// Input and Secret, as given to Create, are read only for a job that
	// has not finished (nil otherwise): it is the one that will run.
	Input, Secret []byte
	// Results are the recorded results, meta only, in recording order.
	Results []Result
	// Sent counts, for each item of an unfinished job without a recorded
	// result, the attempts noted as sent (see Job.Sent): those of runs
	// that a crash or a shutdown ended before its result was recorded.
	Sent map[int]int
	// Cancelled reports that the job's cancellation was recorded.
	Cancelled bool
	// Finished is the payload given to Finish; nil if the job has not
	// finished.
	Finished []byte
}

// Result is a recorded result as Load reports it.
type Result struct {
	Index int
	Meta  []byte
}

// Damage is what Load found broken in one job and what it did about it.
type Damage struct {
	ID string
	// Lost reports a job that could not be kept: its directory was moved
	// to Moved (its secret removed). Otherwise the job was kept, with
	// DroppedBytes of its journal's tail cut off: the results recorded
	// there are lost.
	Lost         bool
	Moved        string
	DroppedBytes int64
	Err          error
}

func (d *Damage) Error() string {
	if d.Lost {
		return fmt.Sprintf("batch job %s lost: %v (moved to %s)", d.ID, d.Err, d.Moved)
	}
	return fmt.Sprintf("batch job %s: the last %d bytes of its journal were unreadable and are dropped (%v): the items recorded there will run again", d.ID, d.DroppedBytes, d.Err)
}

// Load returns the jobs in the directory, oldest directory name first, and
// what it found damaged. Damage never stops it: a job whose journal ends in
// a cut or unreadable record keeps every record before it (the tail is cut
// off, so that new records follow whole ones); a job whose header, or
// whose input or secret while unfinished, cannot be read is moved aside to
// the directory's "damaged" folder. Load also removes what a crash left of
// a job being created or removed. Call it, or LoadEach, once, before using
// the directory.
func (d *Dir) Load() ([]Loaded, []*Damage) {
	var jobs []Loaded
	damage := d.LoadEach(func(l Loaded) { jobs = append(jobs, l) })
	return jobs, damage
}

// LoadEach is Load that hands each job to each as it is read, rather
// than returning them all: memory then holds one job's results at a time,
// however many jobs the directory keeps.
func (d *Dir) LoadEach(each func(Loaded)) []*Damage {
	root := filepath.Join(d.path, jobsName)
	entries, err := os.ReadDir(root)
	if err != nil {
		return []*Damage{{ID: "*", Err: err}}
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].Name() < entries[b].Name() })
	var damage []*Damage
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, pendingPrefix) {
			_ = os.RemoveAll(filepath.Join(root, name))
			continue
		}
		if !e.IsDir() || !validID.MatchString(name) {
			continue
		}
		l, dmg := d.loadJob(name)
		if dmg != nil {
			damage = append(damage, dmg)
		}
		if l != nil {
			each(*l)
		}
	}
	return damage
}

// loadJob loads one job, or moves it aside.
func (d *Dir) loadJob(id string) (*Loaded, *Damage) {
	path := d.jobPath(id)
	lost := func(what string, err error) (*Loaded, *Damage) {
		return nil, d.quarantine(id, fmt.Errorf("%s: %w", what, err))
	}
	hb, err := readFileFrame(filepath.Join(path, headerFile))
	if err != nil {
		return lost(headerFile, err)
	}
	total, header, err := decodeHeader(hb)
	if err != nil {
		return lost(headerFile, err)
	}
	sc, err := scanJournal(filepath.Join(path, journalFile), total)
	if err != nil {
		return lost(journalFile, err)
	}
	l := &Loaded{Header: header, Results: sc.results, Cancelled: sc.cancelled, Finished: sc.finished}
	var sentSize int64
	if l.Finished != nil {
		// A crash between Finish's record and its removal of the secret.
		if err := os.Remove(filepath.Join(path, secretFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return lost(secretFile, err)
		}
		_ = os.Remove(filepath.Join(path, sentFile))
	} else {
		recorded := func(i int) bool { _, ok := sc.offsets[i]; return ok }
		// Damage here costs counts of attempts, never the job.
		if l.Sent, sentSize, err = scanSent(filepath.Join(path, sentFile), total, recorded); err != nil {
			l.Sent, sentSize = nil, 0
			_ = os.Remove(filepath.Join(path, sentFile))
		}
		if l.Input, err = readFileFrame(filepath.Join(path, inputFile)); err != nil {
			return lost(inputFile, err)
		}
		if l.Secret, err = readFileFrame(filepath.Join(path, secretFile)); err != nil {
			return lost(secretFile, err)
		}
	}
	var dmg *Damage
	if sc.dropped > 0 {
		dmg = &Damage{ID: id, DroppedBytes: sc.dropped, Err: sc.damage}
		if err := os.Truncate(filepath.Join(path, journalFile), sc.size); err != nil {
			return lost(journalFile, fmt.Errorf("cut off a damaged tail: %w", err))
		}
	}
	j, err := openJob(id, path, total, sc.size)
	if err != nil {
		return lost(journalFile, err)
	}
	j.finished = l.Finished != nil
	j.sentSize, j.sentDone = sentSize, j.finished
	for _, r := range sc.results {
		j.offsets[r.Index] = sc.offsets[r.Index]
	}
	l.Job = j
	return l, dmg
}

// quarantine moves a job that cannot be loaded to the damaged folder,
// without its secret.
func (d *Dir) quarantine(id string, cause error) *Damage {
	src := d.jobPath(id)
	_ = os.Remove(filepath.Join(src, secretFile))
	dst := filepath.Join(d.path, damagedName, id)
	dmg := &Damage{ID: id, Lost: true, Moved: dst, Err: cause}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		dmg.Err = errors.Join(cause, err)
		return dmg
	}
	_ = os.RemoveAll(dst)
	if err := os.Rename(src, dst); err != nil {
		dmg.Err = errors.Join(cause, err)
	}
	return dmg
}

// scan is what scanJournal read.
type scan struct {
	results   []Result
	offsets   map[int]int64 // of each index's last result record
	cancelled bool
	finished  []byte
	size      int64 // bytes of whole records
	dropped   int64 // bytes after them
	damage    error // why they were dropped
}

// scanJournal reads a journal record by record, checking each one, and
// stops at the first that is cut or damaged. Memory stays bounded by the
// metas, however large the bodies.
func scanJournal(path string, total int) (*scan, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		// Created empty with the job: a journal gone missing has lost
		// everything it had, like one cut at its first byte.
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return nil, err
		}
		return &scan{offsets: map[int]int64{}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sc := &scan{offsets: map[int]int64{}}
	br := bufio.NewReaderSize(f, 64<<10)
	for sc.size < st.Size() {
		n, err := sc.record(br, st.Size()-sc.size, total)
		if err != nil {
			sc.dropped, sc.damage = st.Size()-sc.size, err
			break
		}
		sc.size += n
	}
	return sc, nil
}

// record reads one record of at most left bytes and returns its size.
func (sc *scan) record(br *bufio.Reader, left int64, total int) (int64, error) {
	h := make([]byte, frameHeader)
	if _, err := io.ReadFull(br, h); err != nil {
		return 0, fmt.Errorf("%w: cut short", errDamaged)
	}
	n, sum, err := parseHead(h, left-frameHeader)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: empty record", errDamaged)
	}
	cw := &crcWriter{}
	// Every field read below is part of the payload of n bytes.
	payload := io.TeeReader(io.LimitReader(br, n), cw)
	var kind [1]byte
	if _, err := io.ReadFull(payload, kind[:]); err != nil {
		return 0, fmt.Errorf("%w: cut short", errDamaged)
	}
	var res *Result
	var fin []byte
	switch kind[0] {
	case kindResult:
		if res, err = readResult(payload, n, total); err != nil {
			return 0, err
		}
	case kindCancel:
	case kindFinish:
		fin = make([]byte, n-1)
		if _, err := io.ReadFull(payload, fin); err != nil {
			return 0, fmt.Errorf("%w: cut short", errDamaged)
		}
	default:
		return 0, fmt.Errorf("%w: unknown kind %q", errDamaged, kind[0])
	}
	if _, err := io.Copy(io.Discard, payload); err != nil {
		return 0, err
	}
	if cw.sum != sum {
		return 0, fmt.Errorf("%w: checksum mismatch", errDamaged)
	}
	if cw.n != n {
		return 0, fmt.Errorf("%w: cut short", errDamaged)
	}
	switch kind[0] {
	case kindResult:
		sc.offsets[res.Index] = sc.size
		sc.results = append(sc.results, *res)
	case kindCancel:
		sc.cancelled = true
	case kindFinish:
		sc.finished = fin
	}
	return frameHeader + n, nil
}

// readResult reads a result record's index and meta from its payload,
// after the kind.
func readResult(payload io.Reader, n int64, total int) (*Result, error) {
	var h [8]byte
	if _, err := io.ReadFull(payload, h[:]); err != nil {
		return nil, fmt.Errorf("%w: cut short", errDamaged)
	}
	i := int(binary.LittleEndian.Uint32(h[0:]))
	metaLen := int64(binary.LittleEndian.Uint32(h[4:]))
	if i >= total {
		return nil, fmt.Errorf("%w: item %d of %d", errDamaged, i, total)
	}
	if metaLen > n-9 {
		return nil, fmt.Errorf("%w: meta of %d bytes in a record of %d", errDamaged, metaLen, n)
	}
	meta := make([]byte, metaLen)
	if _, err := io.ReadFull(payload, meta); err != nil {
		return nil, fmt.Errorf("%w: cut short", errDamaged)
	}
	return &Result{Index: i, Meta: meta}, nil
}
