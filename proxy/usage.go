package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/usage"
)

// answerUsage returns the usage that a successful answer read whole
// reports, and whether it reports any: a JSON answer, or an event stream
// read whole (a Call's). A stream passed on is read as it passes instead
// (see streamBody). A JSON answer compressed with gzip or deflate is read
// decompressed, up to limit bytes, its decompressed copy taking its room
// from room while it is read (none left: its usage is not read); other
// encodings are not read.
func answerUsage(resp *fasthttp.Response, limit int, room *bodyBudget) (usage.Tokens, bool) {
	if streamCountsTokens(resp) && resp.BodyStream() == nil {
		return usage.Parse(resp.Body())
	}
	if resp.StatusCode() >= 300 || !mediaTypeIs(resp.Header.ContentType(), "application/json") {
		return usage.Tokens{}, false
	}
	body := bufferedBody(resp)
	if len(body) == 0 {
		return usage.Tokens{}, false
	}
	enc := resp.Header.ContentEncoding()
	if len(enc) > 0 && !bytes.EqualFold(enc, []byte("identity")) {
		plain, held, err := decompress(enc, body, limit, room)
		defer room.give(held)
		if err != nil {
			return usage.Tokens{}, false
		}
		body = plain
	}
	return usage.Parse(body)
}

// errNoRoomToDecompress ends a decompression that room has no more room
// for.
var errNoRoomToDecompress = errors.New("no room left to decompress the answer")

// decompress returns body decoded from enc (gzip or deflate), up to limit
// bytes, and the bytes it took from room for it, to give back once the
// decoded body is no longer used. A few kilobytes can decode to the
// limit (a gzip bomb), and an answer of many megabytes to several times
// its size: the room comes from the budget of answers held, not from
// nowhere.
func decompress(enc, body []byte, limit int, room *bodyBudget) (out []byte, held int64, err error) {
	var r io.Reader
	switch {
	case bytes.EqualFold(enc, []byte("gzip")):
		r, err = gzip.NewReader(bytes.NewReader(body))
	case bytes.EqualFold(enc, []byte("deflate")):
		r, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return nil, 0, errUnknownEncoding
	}
	if err != nil {
		return nil, 0, err
	}
	if n := gzipSize(enc, body); n > 0 && n <= limit {
		// Room for the size the gzip trailer gives, at once: growing
		// by doubling would leave as much again behind as garbage.
		if !room.take(int64(n)) {
			return nil, 0, errNoRoomToDecompress
		}
		held, out = int64(n), make([]byte, 0, n)
	}
	for {
		if len(out) == cap(out) {
			// Full: read one byte to know whether more comes before
			// taking room for it (the size the trailer gave is
			// often exact).
			var one [1]byte
			n, rerr := io.ReadFull(r, one[:])
			switch {
			case rerr == io.EOF:
				return out, held, nil
			case rerr != nil:
				return nil, held, rerr
			}
			if len(out) >= limit {
				return nil, held, errResponseTooLarge
			}
			grow := min(max(cap(out), 16<<10), limit-len(out))
			if !room.take(int64(grow)) {
				return nil, held, errNoRoomToDecompress
			}
			held += int64(grow)
			out = append(append(make([]byte, 0, cap(out)+grow), out...), one[:n]...)
		}
		n, rerr := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		switch {
		case rerr == io.EOF:
			return out, held, nil
		case rerr != nil:
			return nil, held, rerr
		}
	}
}

// gzipSize returns the size of a gzip body once decoded, as its trailer
// gives it (ISIZE, the last member's, modulo 4 GiB: a hint), or 0.
func gzipSize(enc, body []byte) int {
	if !bytes.EqualFold(enc, []byte("gzip")) || len(body) < 18 {
		return 0
	}
	return int(binary.LittleEndian.Uint32(body[len(body)-4:]))
}

var errUnknownEncoding = errors.New("unknown content encoding")

// streamCountsTokens reports whether a streamed answer's usage can be read
// as it passes: a success, an event stream, not compressed.
func streamCountsTokens(resp *fasthttp.Response) bool {
	return resp.StatusCode() < 300 && isEventStream(resp.Header.ContentType()) && identityEncoded(resp)
}

// identityEncoded reports whether resp's body is sent as is (no
// Content-Encoding, or identity).
func identityEncoded(resp *fasthttp.Response) bool {
	enc := resp.Header.ContentEncoding()
	return len(enc) == 0 || bytes.EqualFold(enc, []byte("identity"))
}
