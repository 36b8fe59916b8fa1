package usage

import "bytes"

// maxCut is the longest text a Stream keeps while it waits for the end of a
// usage object that a piece of the stream cut short. A usage object is a
// few hundred bytes; text that would need more is not one, and is dropped.
const maxCut = 64 << 10

// tailLen is how many of the last bytes a Stream keeps to find a "usage"
// key that two pieces of the stream split between them.
const tailLen = 16

// Stream reads the usage of a streamed answer (SSE, or any text) as it
// passes. Write each piece of the body as it is sent on; Tokens then
// reports what the usage objects seen so far say. It keeps the last
// few bytes of the text, and, while a piece ends inside a usage object,
// that object's start: never the stream.
//
// The zero value is ready to use. A Stream is not safe for concurrent use:
// it belongs to the goroutine that copies the body.
type Stream struct {
	r report
	// tail holds the last nt bytes of the text, unless cut is in use.
	tail [tailLen]byte
	nt   int
	// pre is whether an odd number of backslashes comes just before
	// tail[0]: with a key's quote at tail[0], they would escape it.
	pre bool
	// cut is the text from a "usage" key whose value is not complete yet.
	cut []byte
}

// Write scans p. It never fails and never keeps p.
func (s *Stream) Write(p []byte) (int, error) {
	n := len(p)
	switch {
	case len(s.cut) > 0:
		if len(s.cut)+len(p) <= maxCut {
			s.scanCut(p)
			return n, nil
		}
		s.cut = s.cut[:0] // not a usage object: give it up
	case s.nt > 0:
		if k := s.splitKey(p); k >= 0 {
			s.cut = append(s.cut[:0], s.tail[k:s.nt]...)
			s.nt, s.pre = 0, false
			if len(s.cut)+len(p) <= maxCut {
				s.scanCut(p)
				return n, nil
			}
			s.cut = s.cut[:0]
		}
	}
	if c := s.r.scan(p, s.oddEnd()); c >= 0 {
		if len(p)-c <= maxCut {
			s.cut = append(s.cut[:0], p[c:]...)
		}
		s.nt, s.pre = 0, false
		return n, nil
	}
	s.keepTail(p)
	return n, nil
}

// scanCut appends p to the cut text and scans it again.
func (s *Stream) scanCut(p []byte) {
	s.cut = append(s.cut, p...)
	c := s.r.scan(s.cut, false)
	if c >= 0 {
		m := copy(s.cut, s.cut[c:])
		s.cut = s.cut[:m]
		return
	}
	// cut starts with a key's quote, which no backslash escapes.
	s.nt, s.pre = 0, false
	s.keepTail(s.cut)
	s.cut = s.cut[:0]
}

// splitKey returns the offset in tail of a "usage" key that starts in tail
// and ends in p, or -1.
func (s *Stream) splitKey(p []byte) int {
	var w [tailLen + len(`"usage"`)]byte
	m := copy(w[:], s.tail[:s.nt])
	m += copy(w[m:], p[:min(len(p), len(usageKey)-1)])
	for i := 0; ; {
		k := bytes.Index(w[i:m], usageKey)
		if k < 0 {
			return -1
		}
		k += i
		if k < s.nt && k+len(usageKey) > s.nt && !s.escapedInTail(k) {
			return k
		}
		// Resume past the key, as scan does.
		i = k + len(usageKey)
	}
}

// escapedInTail reports whether the quote at tail[k] is escaped.
func (s *Stream) escapedInTail(k int) bool {
	return escaped(s.tail[:], k, s.pre)
}

// oddEnd reports whether the text so far ends with an odd number of
// backslashes: they would escape a quote that starts the next piece.
func (s *Stream) oddEnd() bool {
	return escaped(s.tail[:], s.nt, s.pre)
}

// keepTail records the last bytes of the text, p being the latest.
func (s *Stream) keepTail(p []byte) {
	drop := s.nt + len(p) - tailLen
	if drop <= 0 {
		s.nt += copy(s.tail[s.nt:], p)
		return
	}
	// The backslashes that end the dropped text, and pre if it is all
	// backslashes, come before the new tail.
	at := func(i int) byte {
		if i < s.nt {
			return s.tail[i]
		}
		return p[i-s.nt]
	}
	n := 0
	for i := drop - 1; i >= 0 && at(i) == '\\'; i-- {
		n++
	}
	s.pre = (n%2 == 1) != (n == drop && s.pre)
	if len(p) >= tailLen {
		s.nt = copy(s.tail[:], p[len(p)-tailLen:])
		return
	}
	m := copy(s.tail[:], s.tail[drop:s.nt])
	s.nt = m + copy(s.tail[m:], p)
}

// Tokens returns the usage the stream has reported so far, and whether it
// has reported any.
func (s *Stream) Tokens() (Tokens, bool) {
	return s.r.tokens()
}

// Reset forgets what the stream has seen, keeping its buffer for reuse.
func (s *Stream) Reset() {
	s.r = report{}
	s.nt, s.pre = 0, false
	s.cut = s.cut[:0]
}
