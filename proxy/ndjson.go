package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// ndjsonSuccess reports whether resp is a successful NDJSON stream whose
// lines can be read as they pass (not compressed).
func ndjsonSuccess(resp *fasthttp.Response) bool {
	return resp.StatusCode() < 300 && mediaTypeIs(resp.Header.ContentType(), "application/x-ndjson") && identityEncoded(resp)
}

// ndjsonEnd reads an NDJSON stream (Ollama's native API) as it passes and
// tells whether it reached its end: its last line, {"…","done":true,…}
// (chat, generate) or {"status":"success"} (pull, push, create), or an
// error line, {"error":"…"}. Framed by the close of its connection
// alone, such a stream cannot say by its bytes whether it was cut; its
// lines can. Its memory is a few bytes of the line being read, whatever
// the length of the lines.
//
// "done":true is found anywhere in a line: inside a JSON string its quotes
// would be escaped, so it is the line's own key.
type ndjsonEnd struct {
	// tail holds the last bytes of the line being read, up to
	// len(tail), to find "done":true across reads.
	tail  [ndjsonTail]byte
	tailN int
	head  [ndjsonHead]byte // the start of the line being read
	headN int
	// text says the line being read holds more than white space;
	// done that it says "done":true.
	text, done bool
	// lines says a line of text has ended; last that the last one
	// ended the stream (done, or an error).
	lines, last bool
}

// ndjsonTail is as long as the longest marker the scan looks for, less
// one; ndjsonHead as long as ndjsonStatusSuccess.
const (
	ndjsonTail = 15
	ndjsonHead = 20
)

var (
	ndjsonDone          = []byte(`"done":true`)
	ndjsonDoneSpaced    = []byte(`"done": true`)
	ndjsonError         = []byte(`{"error"`)
	ndjsonStatusSuccess = []byte(`{"status":"success"}`)
)

// write reads the next bytes of the stream.
func (n *ndjsonEnd) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			n.scan(p)
			return
		}
		n.scan(p[:i])
		n.endLine()
		p = p[i+1:]
	}
}

// scan reads part of the line being read.
func (n *ndjsonEnd) scan(part []byte) {
	if !n.text {
		part = bytes.TrimLeft(part, " \t\r")
		if len(part) == 0 {
			return
		}
		n.text = true
	}
	n.headN += copy(n.head[n.headN:], part)
	if !n.done {
		// The marker may straddle the bytes kept and part.
		var b [2 * ndjsonTail]byte
		joined := append(append(b[:0], n.tail[:n.tailN]...), part[:min(len(part), ndjsonTail)]...)
		n.done = hasDone(joined) || hasDone(part)
	}
	if len(part) >= ndjsonTail {
		n.tailN = copy(n.tail[:], part[len(part)-ndjsonTail:])
		return
	}
	if keep := ndjsonTail - len(part); n.tailN > keep {
		copy(n.tail[:], n.tail[n.tailN-keep:n.tailN])
		n.tailN = keep
	}
	n.tailN += copy(n.tail[n.tailN:], part)
}

func hasDone(b []byte) bool {
	return bytes.Contains(b, ndjsonDone) || bytes.Contains(b, ndjsonDoneSpaced)
}

// endLine reads the end of the line being read.
func (n *ndjsonEnd) endLine() {
	if n.text {
		n.lines = true
		head := bytes.TrimRight(n.head[:n.headN], " \t\r")
		n.last = n.done || bytes.HasPrefix(head, ndjsonError) || bytes.Equal(head, ndjsonStatusSuccess)
	}
	*n = ndjsonEnd{lines: n.lines, last: n.last}
}

// ndjsonCutAtClose reports whether body, an answer read until the
// upstream closed the connection (no Content-Length, not chunked), is an
// NDJSON stream cut before its last line.
func ndjsonCutAtClose(resp *fasthttp.Response, body []byte) bool {
	if resp.Header.ContentLength() != -2 || !ndjsonSuccess(resp) {
		return false
	}
	var n ndjsonEnd
	n.write(body)
	return n.cutAtClose()
}

// cutAtClose reads the end of a stream that the upstream's close ended,
// and reports whether the stream was cut: it has lines, and the last one
// neither says "done":true nor is an error.
func (n *ndjsonEnd) cutAtClose() bool {
	n.endLine() // the last line, if the stream did not end it
	return n.lines && !n.last
}
