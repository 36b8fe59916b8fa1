package proxy

import "bytes"

// keepAlives tells, read by read, whether a stream carried content or
// only the events a provider sends to keep an idle stream open: blank
// lines, SSE comment lines (": keep-alive"), and Anthropic's ping event
// ("event: ping", "data: {"type": "ping"}"). Any other line is content,
// as is a line longer than keep-alives are. The zero value is ready.
type keepAlives struct {
	line [maxKeepAliveLine]byte
	n    int  // bytes of the line in progress held in line
	long bool // the line in progress is longer than line holds
}

// maxKeepAliveLine is the longest line read as a keep-alive.
const maxKeepAliveLine = 64

// content reports whether p, the next bytes of the stream, holds content,
// in a line it ends or one that is too long for a keep-alive already.
func (k *keepAlives) content(p []byte) bool {
	found := false
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		switch {
		case k.long:
			// Every byte of a long line is content, however many
			// reads it takes to arrive.
			found = found || len(part) > 0 || i >= 0
		case k.n+len(part) <= len(k.line):
			k.n += copy(k.line[k.n:], part)
		default:
			k.long, found = true, true
		}
		if i < 0 {
			break
		}
		if !k.long && !isKeepAlive(k.line[:k.n]) {
			found = true
		}
		k.n, k.long = 0, false
		p = p[i+1:]
	}
	return found
}

// isKeepAlive reports whether a line, without its LF, keeps a stream open
// and says nothing.
func isKeepAlive(line []byte) bool {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == ':' {
		return true
	}
	if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
		return string(bytes.TrimSpace(v)) == "ping"
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		var b [maxKeepAliveLine]byte
		compact := b[:0]
		for _, c := range v {
			if c != ' ' && c != '\t' {
				compact = append(compact, c)
			}
		}
		return string(compact) == `{"type":"ping"}`
	}
	return false
}
