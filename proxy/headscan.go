package proxy

import (
	"bytes"
	"errors"
)

// errBareLF refuses a request head with a line that ends in a bare LF.
var errBareLF = errors.New("request head line ends in a bare LF, not CR LF")

// headScan watches the bytes of a request head, as a client connection
// hands them to fasthttp, for a line that ends in a bare LF; and those of
// an upstream's answer head, as an upstream connection does (see
// trackedConn.answerHead), where fasthttp's client waits the same way.
//
// RFC 9112 §2.2 lets a server read a bare LF as a line's end, or not.
// fasthttp v1.74 does both: it finds a head's end at a blank line of
// either kind, then waits for a CR LF CR LF before parsing the head's
// fields, so a head that ends in bare LFs waits for the read timeout
// (60 s) and gets 408, unless its body happens to hold a CR LF CR LF.
// Governor refuses such a head at once instead, whatever its body: a bare
// LF inside a field is also how a request is smuggled past a proxy in
// front that does not end lines there ("Host: x\nTransfer-Encoding:
// chunked" is one field to it, two to fasthttp).
//
// The scan begins with a request's first byte read from an empty buffer
// (fasthttp's one-byte read, see readahead.go) and ends at the head's
// blank line. A client connection's scan (see startRequest) goes on past
// it: it skips the request's body, of the length its Content-Length
// gives or chunk by chunk when it is chunked (its trailer read as lines),
// and scans the head of the request pipelined behind it, which fasthttp
// may have read in the same read, and so on. A body framed otherwise
// (another Transfer-Encoding, both framings, a length or a chunk size it
// cannot read) ends the scan: what follows it is not scanned, and
// fasthttp refuses most such requests itself. The scan numbers the requests as fasthttp does
// (RequestCtx.ConnRequestNum), so that a head read whole with a bare LF
// is refused as the request it is, not as the one before it.
type headScan struct {
	on      bool // scanning a head
	started bool // the request line has begun (empty lines before it are skipped)
	inLine  int  // bytes of the current line scanned so far, a CR at its end included
	lastCR  bool // the last byte scanned was a CR
	bareLF  bool // a line of the head ended in a bare LF

	// For a client connection's requests (follow): the scan goes on
	// past a head's end, through its body, to the next head.
	follow bool
	req    uint64 // the number of the request whose head or body is scanned
	// bareLFReq is the number of the request whose head has a line that
	// ends in a bare LF (the scan stops there); handled the number of
	// the last request handled (see refuses).
	bareLFReq, handled uint64
	field              [maxFramingLine]byte // the start of the current line of the head
	length             int64                // the head's Content-Length; -1 for none
	chunked            bool                 // the head's body is framed by Transfer-Encoding: chunked alone
	unframed           bool                 // the head's body is framed neither way the scan follows
	body               int64                // bytes of the body (or its chunk) still to skip
	// part is the part of a chunked body the lines scanned belong to.
	part chunkPart
}

// chunkPart is a part of a chunked body (RFC 9112 §7.1) that the scan
// reads as lines.
type chunkPart uint8

const (
	inHead       chunkPart = iota // no chunked body: a head's lines
	chunkSize                     // a chunk's size line
	chunkEnd                      // the CR LF after a chunk's data
	chunkTrailer                  // the trailer's lines, up to its blank line
)

// maxFramingLine is the longest head line the scan reads a
// Content-Length from; a longer one leaves the body's length unknown.
const maxFramingLine = 48

// start begins the scan of a new head.
func (s *headScan) start() { *s = headScan{on: true} }

// startRequest begins the scan of a client connection's next request,
// whose first byte fasthttp reads from an empty buffer: the one after the
// last request handled.
func (s *headScan) startRequest() {
	*s = headScan{on: true, follow: true, req: s.handled + 1, handled: s.handled, length: -1}
}

// refuses tells the scan that request n (as RequestCtx.ConnRequestNum
// numbers it) is handled, and reports whether its head has a line that
// ends in a bare LF: fasthttp parsed it all the same, having a CR LF CR
// LF in what followed.
func (s *headScan) refuses(n uint64) bool {
	s.handled = n
	return s.bareLF && s.bareLFReq == n
}

// scan reads the next bytes of the head, or, when following, of the
// requests.
func (s *headScan) scan(p []byte) {
	for len(p) > 0 {
		if s.body > 0 {
			n := min(int64(len(p)), s.body)
			s.body -= n
			p = p[n:]
			switch {
			case s.body > 0:
			case s.chunked:
				s.part = chunkEnd
			default:
				s.nextHead()
			}
			continue
		}
		if !s.on {
			return
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.keep(p)
			s.inLine += len(p)
			s.lastCR = p[len(p)-1] == '\r'
			return
		}
		s.keep(p[:i])
		cr := i > 0 && p[i-1] == '\r' || i == 0 && s.lastCR
		line := s.inLine + i // its length, without the LF
		if cr {
			line--
		}
		switch {
		case s.part != inHead:
			s.chunkLine(s.field[:min(line, len(s.field))], line > len(s.field))
		case line == 0 && !s.started: // an empty line before the request line
		case !cr:
			s.bareLF, s.bareLFReq, s.on = true, s.req, false
		case line == 0: // the head's end
			s.on = false
			s.headEnd()
		default:
			if s.started && s.follow {
				s.framing(s.field[:min(line, len(s.field))], line > len(s.field))
			}
			s.started = true
		}
		s.inLine, s.lastCR = 0, false
		p = p[i+1:]
	}
}

// keep adds part of the current line to the start of it kept in field.
func (s *headScan) keep(part []byte) {
	if s.follow && s.inLine < len(s.field) {
		copy(s.field[s.inLine:], part)
	}
}

// framing reads a field line of the head (its start, when long) for the
// framing of the request's body.
func (s *headScan) framing(line []byte, long bool) {
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok {
		return
	}
	switch {
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		if s.chunked || !bytes.EqualFold(bytes.Trim(value, " \t"), []byte("chunked")) {
			s.unframed = true
		}
		s.chunked = true
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, ok := parseLength(bytes.Trim(value, " \t"))
		if long || !ok || s.length >= 0 && s.length != n {
			s.unframed = true
		}
		s.length = n
	}
}

// parseLength parses a Content-Length value: decimal digits.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// headEnd follows a head's end, when following: to its body, or the next
// head.
func (s *headScan) headEnd() {
	if !s.follow {
		return
	}
	switch {
	case s.unframed || s.chunked && s.length >= 0:
		s.follow = false
		return
	case s.chunked:
		s.on, s.part = true, chunkSize
		return
	}
	s.body = max(s.length, 0)
	if s.body == 0 {
		s.nextHead()
	}
}

// chunkLine reads a line of a chunked body (its start, when long): a
// chunk's size, the end of its data, or a line of the trailer.
func (s *headScan) chunkLine(line []byte, long bool) {
	switch s.part {
	case chunkSize:
		size, _, _ := bytes.Cut(line, []byte{';'})
		n, ok := parseChunkSize(bytes.Trim(size, " \t"))
		switch {
		case long && len(size) == len(line) || !ok:
			s.on, s.follow = false, false
		case n == 0:
			s.part = chunkTrailer
		default:
			s.body, s.part = n, chunkEnd
		}
	case chunkEnd:
		if len(line) > 0 {
			s.on, s.follow = false, false
			return
		}
		s.part = chunkSize
	case chunkTrailer:
		if len(line) == 0 {
			s.nextHead()
		}
	}
}

// parseChunkSize parses a chunk's size: hexadecimal digits.
func parseChunkSize(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | int64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case 'A' <= c && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

// nextHead begins the scan of the head of the next request pipelined.
func (s *headScan) nextHead() {
	s.on, s.started, s.inLine, s.lastCR = true, false, 0, false
	s.req++
	s.length, s.chunked, s.unframed, s.part = -1, false, false, inHead
}
