package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/usage"
)

// countTokens adds the tokens that a successful answer read whole reports
// in its usage to its lane's counters. A streamed answer is counted as it
// passes instead (see streamBody). An answer compressed with gzip or
// deflate is read decompressed, up to limit bytes; other encodings are not
// read.
func countTokens(l *lane.Lane, resp *fasthttp.Response, limit int) {
	if resp.StatusCode() >= 300 || !mediaTypeIs(resp.Header.ContentType(), "application/json") {
		return
	}
	body := bufferedBody(resp)
	if len(body) == 0 {
		return
	}
	enc := resp.Header.ContentEncoding()
	if len(enc) > 0 && !bytes.EqualFold(enc, []byte("identity")) {
		var err error
		if body, err = decompress(enc, body, limit); err != nil {
			return
		}
	}
	if t, ok := usage.Parse(body); ok {
		l.CountTokens(t)
	}
}

// decompress returns body decoded from enc (gzip or deflate), up to limit
// bytes.
func decompress(enc, body []byte, limit int) ([]byte, error) {
	var r io.Reader
	var err error
	switch {
	case bytes.EqualFold(enc, []byte("gzip")):
		r, err = gzip.NewReader(bytes.NewReader(body))
	case bytes.EqualFold(enc, []byte("deflate")):
		r, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return nil, errUnknownEncoding
	}
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(r, int64(limit)))
}

var errUnknownEncoding = errors.New("unknown content encoding")

// streamCountsTokens reports whether a streamed answer's usage can be read
// as it passes: a success, an event stream, not compressed.
func streamCountsTokens(resp *fasthttp.Response) bool {
	enc := resp.Header.ContentEncoding()
	return resp.StatusCode() < 300 && isEventStream(resp.Header.ContentType()) &&
		(len(enc) == 0 || bytes.EqualFold(enc, []byte("identity")))
}
