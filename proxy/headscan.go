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
// blank line. A request pipelined behind another in one read is not
// scanned: fasthttp had it before its first byte was read this way.
type headScan struct {
	on      bool // scanning a head
	started bool // the request line has begun (empty lines before it are skipped)
	inLine  int  // bytes of the current line scanned so far, a CR at its end included
	lastCR  bool // the last byte scanned was a CR
	bareLF  bool // a line of the head ended in a bare LF
}

// start begins the scan of a new head.
func (s *headScan) start() { *s = headScan{on: true} }

// scan reads the next bytes of the head.
func (s *headScan) scan(p []byte) {
	for s.on && len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.inLine += len(p)
			s.lastCR = p[len(p)-1] == '\r'
			return
		}
		cr := i > 0 && p[i-1] == '\r' || i == 0 && s.lastCR
		line := s.inLine + i // its length, without the LF
		if cr {
			line--
		}
		switch {
		case line == 0 && !s.started: // an empty line before the request line
		case !cr:
			s.bareLF, s.on = true, false
		case line == 0: // the head's end
			s.on = false
		default:
			s.started = true
		}
		s.inLine, s.lastCR = 0, false
		p = p[i+1:]
	}
}
