package journal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// A job's sent file notes each attempt of an item as it is sent: one
// frame per attempt, whose payload is the item's index (u32), 12 bytes in
// all. It is a file apart from the journal so that a journal stays
// readable by a Governor that knows nothing of it.
const (
	sentFile   = "sent"
	sentRecord = frameHeader + 4
)

// Sent notes that an attempt of item i is being sent, so that after a
// restart Load counts it if the item's result was never recorded (see
// Loaded.Sent). It does not wait for the disk: the note survives the
// process being killed (the kernel has it); a machine crash may lose
// those of its last seconds, not yet written back. A write the disk refuses leaves the file as it was, the
// attempt uncounted, and is reported as a *WriteError.
func (j *Job) Sent(i int) error {
	if i < 0 || i >= j.total {
		return fmt.Errorf("job %s: item %d out of range", j.id, i)
	}
	idx := binary.LittleEndian.AppendUint32(nil, uint32(i))
	rec := append(frameHead(idx), idx...)
	j.sentMu.Lock()
	defer j.sentMu.Unlock()
	if j.sentDone {
		return fmt.Errorf("job %s: finished or closed", j.id)
	}
	if j.sentBroken != nil {
		return j.sentBroken
	}
	if j.sent == nil {
		f, err := os.OpenFile(filepath.Join(j.path, sentFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return &WriteError{Err: fmt.Errorf("job %s: sent: %w", j.id, err)}
		}
		j.sent = f
	}
	if _, err := j.sent.Write(rec); err != nil {
		if terr := j.sent.Truncate(j.sentSize); terr != nil {
			j.sentBroken = fmt.Errorf("job %s: sent: a write failed (%v) and could not be undone: %w", j.id, err, terr)
			return j.sentBroken
		}
		return &WriteError{Err: fmt.Errorf("job %s: sent: %w", j.id, err)}
	}
	j.sentSize += sentRecord
	return nil
}

// closeSent closes the sent file, if open: no attempt is noted any more.
func (j *Job) closeSent() {
	j.sentMu.Lock()
	defer j.sentMu.Unlock()
	j.sentDone = true
	if j.sent != nil {
		_ = j.sent.Close()
		j.sent = nil
	}
}

// scanSent reads a job's sent file and counts the attempts of each item
// that recorded does not report recorded. It stops at the first record
// that is cut or fails its checksum, and cuts the file back to the whole
// records before it, so that new ones follow them; it returns their size.
// A missing file counts nothing.
func scanSent(path string, total int, recorded func(i int) bool) (map[int]int, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var counts map[int]int
	var size int64
	br := bufio.NewReader(f)
	rec := make([]byte, sentRecord)
	for {
		if _, err := io.ReadFull(br, rec); err != nil {
			break // the end, or a cut record
		}
		n, sum, err := parseHead(rec, 4)
		if err != nil || n != 4 || crc32.Checksum(rec[frameHeader:], castagnoli) != sum {
			break
		}
		i := int(binary.LittleEndian.Uint32(rec[frameHeader:]))
		if i >= total {
			break
		}
		size += sentRecord
		if recorded(i) {
			continue // its result counts its attempts
		}
		if counts == nil {
			counts = map[int]int{}
		}
		counts[i]++
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if st.Size() > size {
		if err := os.Truncate(path, size); err != nil {
			return nil, 0, fmt.Errorf("cut off a damaged tail: %w", err)
		}
	}
	return counts, size, nil
}
