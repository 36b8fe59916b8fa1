package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Kinds of journal records.
const (
	kindResult byte = 'R' // u32 index | u32 meta length | meta | body
	kindCancel byte = 'C' // nothing
	kindFinish byte = 'F' // the caller's payload
)

// resultHead is the part of a result record before its meta: the frame
// header, the kind, the index and the meta length.
const resultHead = frameHeader + 1 + 4 + 4

// maxItems bounds a job's items.
const maxItems = 1 << 24

// ErrFinished reports a write to a job that has finished.
var ErrFinished = errors.New("job finished")

// WriteError reports a record that the disk did not take: a full disk, a
// file size limit, a device that fails. The journal is left as it was
// before the write, so the same record may be tried again later.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Job is one job's files. Its methods are safe for concurrent use.
type Job struct {
	id    string
	path  string
	total int

	mu       sync.Mutex
	f        *os.File // the journal, open for appending; nil once closed
	size     int64    // bytes of whole records in the journal
	offsets  []int64  // of item i's result record, -1 if none
	finished bool
	broken   error // a write that could not be undone: nothing more is written

	// sentMu guards the sent file (see Sent), apart from mu so that an
	// attempt never waits for a large result being written.
	sentMu     sync.Mutex
	sent       *os.File // opened at the first attempt noted
	sentSize   int64    // bytes of whole records in it
	sentDone   bool     // the job has finished or is closed
	sentBroken error    // a write to it that could not be undone

	syncMu sync.Mutex // one fsync at a time
	synced int64      // journal bytes known to be on disk
}

func openJob(id, path string, total int, size int64) (*Job, error) {
	f, err := os.OpenFile(filepath.Join(path, journalFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	j := &Job{id: id, path: path, total: total, f: f, size: size, synced: size, offsets: make([]int64, total)}
	for i := range j.offsets {
		j.offsets[i] = -1
	}
	return j, nil
}

// ID is the job's id.
func (j *Job) ID() string { return j.id }

// Total is the job's number of items.
func (j *Job) Total() int { return j.total }

// Put records the result of item i: meta (small, read back without the
// body) and body. It returns once the record is on disk. A result recorded
// twice reads back as the later one. An error that is a *WriteError (a
// full disk) left the journal as it was: Put may be called again.
func (j *Job) Put(i int, meta, body []byte) error { return j.put(i, meta, body, true) }

// PutAsync is Put that returns once the record is written, without
// waiting for the disk: it survives the process being killed (the kernel
// has it), and the next Put, Cancel or Finish that returns has made it
// durable too. For many results at once, such as the rows of the items
// a cancelled job never ran, it saves a sync each.
func (j *Job) PutAsync(i int, meta, body []byte) error { return j.put(i, meta, body, false) }

func (j *Job) put(i int, meta, body []byte, wait bool) error {
	if i < 0 || i >= j.total {
		return fmt.Errorf("job %s: item %d out of range", j.id, i)
	}
	head := make([]byte, 9)
	head[0] = kindResult
	binary.LittleEndian.PutUint32(head[1:], uint32(i))
	binary.LittleEndian.PutUint32(head[5:], uint32(len(meta)))
	return j.append(func(off int64) { j.offsets[i] = off }, wait, head, meta, body)
}

// Cancel records that the job was cancelled: a job loaded with its
// cancellation recorded is not to be resumed.
func (j *Job) Cancel() error {
	return j.append(nil, true, []byte{kindCancel})
}

// Finish records that the job has finished, with the caller's payload, and
// removes its secret and its notes of attempts sent. Nothing more can be recorded.
func (j *Job) Finish(payload []byte) error {
	if err := j.append(nil, true, []byte{kindFinish}, payload); err != nil {
		return err
	}
	j.mu.Lock()
	j.finished = true
	j.mu.Unlock()
	j.closeSent()
	// Its results count every attempt: the notes of those sent go too.
	if err := os.Remove(filepath.Join(j.path, sentFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("job %s: remove sent: %w", j.id, err)
	}
	if err := os.Remove(filepath.Join(j.path, secretFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("job %s: remove secret: %w", j.id, err)
	}
	return nil
}

// append writes one record whose payload is parts, then calls at (if set)
// with its offset, and returns once it is on disk if wait is set, else
// once it is written.
func (j *Job) append(at func(off int64), wait bool, parts ...[]byte) error {
	j.mu.Lock()
	if err := j.writableLocked(); err != nil {
		j.mu.Unlock()
		return err
	}
	off := j.size
	n, err := j.writeLocked(parts)
	if err != nil {
		j.mu.Unlock()
		return fmt.Errorf("job %s: journal: %w", j.id, err)
	}
	j.size += n
	if at != nil {
		at(off)
	}
	end := j.size
	j.mu.Unlock()
	if !wait {
		return nil
	}
	return j.sync(end)
}

// writableLocked requires j.mu to be held.
func (j *Job) writableLocked() error {
	switch {
	case j.broken != nil:
		return j.broken
	case j.f == nil:
		return fmt.Errorf("job %s: closed", j.id)
	case j.finished:
		return fmt.Errorf("job %s: %w", j.id, ErrFinished)
	}
	return nil
}

// writeLocked appends a frame of parts. A failed write is cut off again,
// so that the journal stays a sequence of whole records, and reported as a
// *WriteError; if even that fails, the job is broken. It requires j.mu to
// be held.
func (j *Job) writeLocked(parts [][]byte) (int64, error) {
	var n int64
	for _, p := range parts {
		n += int64(len(p))
	}
	if n > maxPayload {
		return 0, fmt.Errorf("record of %d bytes: more than %d", n, maxPayload)
	}
	bufs := append([][]byte{frameHead(parts...)}, parts...)
	for _, b := range bufs {
		if _, err := j.f.Write(b); err != nil {
			if terr := j.f.Truncate(j.size); terr != nil {
				j.broken = fmt.Errorf("job %s: journal: a write failed (%v) and could not be undone: %w", j.id, err, terr)
				return 0, err
			}
			return 0, &WriteError{Err: err}
		}
	}
	return frameHeader + n, nil
}

// sync makes the journal durable up to end. Callers that find their bytes
// synced by another's fsync return at once (group commit).
func (j *Job) sync(end int64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.synced >= end {
		return nil
	}
	j.mu.Lock()
	f, size := j.f, j.size
	j.mu.Unlock()
	if f == nil {
		return fmt.Errorf("job %s: closed", j.id)
	}
	if err := f.Sync(); err != nil {
		// Written again, the record reads back as the later copy.
		return &WriteError{Err: fmt.Errorf("job %s: journal sync: %w", j.id, err)}
	}
	j.synced = size
	return nil
}

// Close closes the job's journal; the job stays on disk. Later writes
// fail; Readers opened before keep working.
func (j *Job) Close() { j.close() }

// close closes the journal; later writes fail.
func (j *Job) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
	j.closeSent()
}

// offset returns where item i's result record starts, or -1.
func (j *Job) offset(i int) int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if i < 0 || i >= j.total {
		return -1
	}
	return j.offsets[i]
}

func encodeHeader(total int, header []byte) []byte {
	b := make([]byte, 4, 4+len(header))
	binary.LittleEndian.PutUint32(b, uint32(total))
	return append(b, header...)
}

func decodeHeader(b []byte) (total int, header []byte, err error) {
	if len(b) < 4 {
		return 0, nil, fmt.Errorf("%w: header of %d bytes", errDamaged, len(b))
	}
	total = int(binary.LittleEndian.Uint32(b))
	if total > maxItems {
		return 0, nil, fmt.Errorf("%w: %d items", errDamaged, total)
	}
	return total, b[4:], nil
}
