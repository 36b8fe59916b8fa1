package proxy

import (
	"bytes"
	"encoding/json"
)

// overloadWatch reads the server-sent events of a streamed answer as they
// pass and notes whether the provider ended it with an overload error:
// Anthropic, once overloaded, may end a stream it began with a 200 by an
// event
//
//	event: error
//	data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
//
// which says what a 529 before the answer would have said. It keeps at most
// maxEventLine bytes of the line being read: longer lines are content, never
// such an error, so its memory does not grow with the stream.
type overloadWatch struct {
	line     []byte // the start of the line being read, up to maxEventLine
	long     bool   // that line is longer than maxEventLine
	errEvent bool   // the event being read is named "error"
	seen     bool   // an overload error has passed
}

// maxEventLine bounds the line an error event's data may take.
const maxEventLine = 1024

// write reads the next bytes of the stream. A line that ends in p is read
// where it is; only the start of one that continues in the next read is
// kept.
func (w *overloadWatch) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.keep(p)
			return
		}
		line := p[:i]
		if len(w.line) > 0 || w.long {
			w.keep(line)
			line = w.line
		}
		if !w.long {
			w.readLine(line)
		}
		w.line, w.long = w.line[:0], false
		p = p[i+1:]
	}
}

// keep adds part to the start of the line kept, up to maxEventLine.
func (w *overloadWatch) keep(part []byte) {
	if w.long || len(w.line)+len(part) > maxEventLine {
		w.long = true
		return
	}
	w.line = append(w.line, part...)
}

// readLine reads one line of the stream, without its line feed.
func (w *overloadWatch) readLine(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) == 0 { // the event ends
		w.errEvent = false
		return
	}
	if len(line) > maxEventLine {
		return
	}
	name, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(name) {
	case "event":
		w.errEvent = string(value) == "error"
	case "data":
		// An unescaped "error" is a JSON key or value, never text of
		// the answer (whose quotes are escaped): only such lines are
		// parsed.
		if (w.errEvent || bytes.Contains(value, []byte(`"error"`))) && isOverloadEvent(value) {
			w.seen = true
		}
	}
}

// isOverloadEvent reports whether data is the JSON of an overload error
// event.
func isOverloadEvent(data []byte) bool {
	var ev struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	return json.Unmarshal(data, &ev) == nil && ev.Error.Type == "overloaded_error"
}
