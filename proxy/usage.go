package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/usage"
)

// answerUsage returns the usage that a successful answer read whole
// reports, and whether it reports any: a JSON answer, or an event stream
// read whole (a Call's). A stream passed on is read as it passes instead
// (see streamBody). A JSON answer compressed with gzip or deflate is read
// decompressed, up to limit bytes; other encodings are not read.
func answerUsage(resp *fasthttp.Response, limit int) (usage.Tokens, bool) {
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
		var err error
		if body, err = decompress(enc, body, limit); err != nil {
			return usage.Tokens{}, false
		}
	}
	return usage.Parse(body)
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
	return resp.StatusCode() < 300 && isEventStream(resp.Header.ContentType()) && identityEncoded(resp)
}

// identityEncoded reports whether resp's body is sent as is (no
// Content-Encoding, or identity).
func identityEncoded(resp *fasthttp.Response) bool {
	enc := resp.Header.ContentEncoding()
	return len(enc) == 0 || bytes.EqualFold(enc, []byte("identity"))
}
