package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// Reader reads a job's recorded results. It has a file of its own, so it
// keeps working while the job records more, and after the job is removed.
// A Reader is not safe for concurrent use.
type Reader struct {
	j *Job
	f *os.File
}

// Open returns a Reader of j's results. Close it when done.
func (j *Job) Open() (*Reader, error) {
	f, err := os.Open(filepath.Join(j.path, journalFile))
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", j.id, err)
	}
	return &Reader{j: j, f: f}, nil
}

// Close releases the Reader's file.
func (r *Reader) Close() error { return r.f.Close() }

// Meta returns the meta of item i's result, without reading its body; ok
// is false when none is recorded.
func (r *Reader) Meta(i int) (meta []byte, ok bool, err error) {
	meta, _, ok, err = r.read(i, false)
	return meta, ok, err
}

// Get returns the meta and body of item i's result, checked against the
// record's checksum; ok is false when none is recorded.
func (r *Reader) Get(i int) (meta, body []byte, ok bool, err error) {
	meta, body, ok, err = r.read(i, true)
	return meta, body, ok, err
}

func (r *Reader) read(i int, withBody bool) (meta, body []byte, ok bool, err error) {
	off := r.j.offset(i)
	if off < 0 {
		return nil, nil, false, nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("job %s: item %d at offset %d: %w", r.j.id, i, off, err)
		}
	}()
	head := make([]byte, resultHead)
	if err := readFull(r.f, head, off); err != nil {
		return nil, nil, false, err
	}
	n := int64(binary.LittleEndian.Uint32(head[0:]))
	sum := binary.LittleEndian.Uint32(head[4:])
	if head[frameHeader] != kindResult || int(binary.LittleEndian.Uint32(head[frameHeader+1:])) != i {
		return nil, nil, false, fmt.Errorf("%w: not item %d's result", errDamaged, i)
	}
	metaLen := int64(binary.LittleEndian.Uint32(head[frameHeader+5:]))
	if metaLen > n-9 || n > maxPayload {
		return nil, nil, false, fmt.Errorf("%w: meta of %d bytes in a record of %d", errDamaged, metaLen, n)
	}
	size := metaLen
	if withBody {
		size = n - 9
	}
	buf := make([]byte, size)
	if err := readFull(r.f, buf, off+resultHead); err != nil {
		return nil, nil, false, err
	}
	meta, body = buf[:metaLen], buf[metaLen:]
	if withBody {
		c := crc32.Update(0, castagnoli, head[frameHeader:])
		if crc32.Update(c, castagnoli, buf) != sum {
			return nil, nil, false, fmt.Errorf("%w: checksum mismatch", errDamaged)
		}
	}
	return meta, body, true, nil
}
