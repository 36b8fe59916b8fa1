package proxy

// jsonEnd follows a JSON text as it passes, read by read, far enough to
// tell at its end whether it is whole: a top-level value has begun, every
// object and array it opened is closed, and no string is left open. It
// does not validate the JSON (the provider's answer is passed on as it
// is); it tells a JSON answer framed by its connection's close alone,
// which the close cut, from a whole one, as json.Valid does for an answer
// read whole (see cutAtClose), in constant memory. The zero value is
// ready.
type jsonEnd struct {
	depth int  // objects and arrays open
	str   bool // inside a string
	esc   bool // the last byte was a backslash that escapes the next, in a string
	began bool // a value has begun
	broke bool // more closes than opens: not JSON
}

// write reads the next bytes of the text.
func (j *jsonEnd) write(p []byte) {
	for _, c := range p {
		switch {
		case j.str:
			switch {
			case j.esc:
				j.esc = false
			case c == '\\':
				j.esc = true
			case c == '"':
				j.str = false
			}
		case c == '"':
			j.str, j.began = true, true
		case c == '{' || c == '[':
			j.depth++
			j.began = true
		case c == '}' || c == ']':
			j.depth--
			if j.depth < 0 {
				j.broke = true
			}
		case c != ' ' && c != '\t' && c != '\r' && c != '\n':
			j.began = true
		}
	}
}

// whole reports whether the text read so far is a whole JSON value, as
// far as its nesting tells.
func (j *jsonEnd) whole() bool {
	return j.began && j.depth == 0 && !j.str && !j.broke
}
