package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// A frame is how every record is written: its payload's length and CRC-32C,
// then the payload.
//
//	u32 length (little endian) | u32 crc32c(payload) | payload
const frameHeader = 8

// maxPayload bounds a frame's payload: a length beyond it is damage, not an
// allocation to attempt.
const maxPayload = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errDamaged reports a frame that is cut short or fails its checksum.
var errDamaged = errors.New("damaged record")

// frameHead returns the header of a frame whose payload is parts.
func frameHead(parts ...[]byte) []byte {
	var n int
	var sum uint32
	for _, p := range parts {
		n += len(p)
		sum = crc32.Update(sum, castagnoli, p)
	}
	h := make([]byte, frameHeader)
	binary.LittleEndian.PutUint32(h[0:], uint32(n))
	binary.LittleEndian.PutUint32(h[4:], sum)
	return h
}

// parseHead reads a frame header, checking the length against what is left
// of the file.
func parseHead(h []byte, left int64) (n int64, sum uint32, err error) {
	n = int64(binary.LittleEndian.Uint32(h[0:]))
	sum = binary.LittleEndian.Uint32(h[4:])
	if n > maxPayload || n > left {
		return 0, 0, fmt.Errorf("%w: payload of %d bytes, %d left", errDamaged, n, left)
	}
	return n, sum, nil
}

// writeFileFrame writes payload as the one frame of a new file and syncs it.
func writeFileFrame(path string, payload []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(frameHead(payload), payload...))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFileFrame reads the one frame of a file written by writeFileFrame.
func readFileFrame(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < frameHeader {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a header", errDamaged, len(b))
	}
	n, sum, err := parseHead(b, int64(len(b)-frameHeader))
	if err != nil {
		return nil, err
	}
	if int64(len(b)-frameHeader) != n {
		return nil, fmt.Errorf("%w: %d bytes after the header, want %d", errDamaged, len(b)-frameHeader, n)
	}
	payload := b[frameHeader:]
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errDamaged)
	}
	return payload, nil
}

// crcWriter feeds what is written to it into a running CRC-32C.
type crcWriter struct {
	sum uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	c.sum = crc32.Update(c.sum, castagnoli, p)
	c.n += int64(len(p))
	return len(p), nil
}

// readFull reads len(p) bytes at off, turning a short file into damage.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	_, err := r.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: cut short", errDamaged)
	}
	return err
}
