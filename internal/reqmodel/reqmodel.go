package reqmodel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
)

// Of returns the model that the JSON request body names; empty if it
// names none (see the package comment).
//
// It runs on every call, and a prompt can be hundreds of kilobytes, so it
// neither decodes nor makes a second pass: json.Unmarshal allocates a
// decoder and walks into every message, and json.Valid alone costs about
// 2 ns a byte. One scan (jsonScan.scan) checks the syntax exactly as
// json.Valid does and picks up the top-level keys on the way, skipping the
// inside of strings eight bytes at a time. Anything unusual (an escape or
// a non-ASCII byte in a model key or value) goes to json.Unmarshal.
func Of(body []byte) string {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ""
	}
	var s jsonScan
	switch valid := s.scan(body); {
	case !valid || s.notString:
		return ""
	case s.unusual:
		return unmarshalModel(body) // it might unescape or fold to "model"
	case s.found:
		return string(s.model)
	}
	return ""
}

func unmarshalModel(body []byte) string {
	var v struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Model
}

// jsonScan validates a JSON text and notes its top-level "model" fields.
type jsonScan struct {
	b []byte
	i int

	model     []byte // the value of the last plain "model" key
	found     bool   // model is set
	unusual   bool   // a top-level key or model value has an escape or a non-ASCII byte
	notString bool   // a "model" key holds something other than a string or null
}

// maxJSONDepth is encoding/json's limit on nesting, which json.Valid
// enforces.
const maxJSONDepth = 10000

// scan reports whether b is valid JSON, as json.Valid(b) would. It stops
// early, reporting false, once notString is set (the answer is "" then).
func (s *jsonScan) scan(b []byte) bool {
	s.b, s.i = b, 0
	// The open containers, innermost last: '{' or '['.
	var stackBuf [64]byte
	stack := stackBuf[:0]
	modelNext := false // the value about to be read is a top-level "model"
	for {
		// A value.
		s.ws()
		if s.i >= len(b) {
			return false
		}
		switch c := b[s.i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxJSONDepth || modelNext {
				s.notString = modelNext
				return false
			}
			stack = append(stack, c)
			s.i++
			s.ws()
			if s.i < len(b) && b[s.i] == c+2 { // '}' or ']'
				s.i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' {
				if !s.key(len(stack) == 1, &modelNext) {
					return false
				}
			}
			continue // the first value of the container
		case c == '"':
			start := s.i + 1
			esc, ok := s.str()
			if !ok {
				return false
			}
			if modelNext {
				if v := b[start : s.i-1]; esc || !ascii(v) {
					s.unusual = true
				} else {
					s.model, s.found = v, true
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			if !s.number() || modelNext {
				s.notString = modelNext
				return false
			}
		case c == 'n':
			if !s.literal("null") {
				return false
			}
			// json.Unmarshal leaves the field as it was.
		case c == 't' || c == 'f':
			if !s.literal("true") && !s.literal("false") || modelNext {
				s.notString = modelNext
				return false
			}
		default:
			return false
		}
		modelNext = false

		// After a value: the end of the text, or of containers, or a
		// comma and the next value (and key).
		for {
			s.ws()
			if len(stack) == 0 {
				return s.i == len(b)
			}
			if s.i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			if c := b[s.i]; c == top+2 {
				s.i++
				stack = stack[:len(stack)-1]
				continue
			} else if c != ',' {
				return false
			}
			s.i++
			if top == '{' {
				s.ws()
				if !s.key(len(stack) == 1, &modelNext) {
					return false
				}
			}
			break
		}
	}
}

// ws skips whitespace.
func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// key reads an object key and its colon. For a key of the top-level object
// it sets *modelNext when the key is "model".
func (s *jsonScan) key(top bool, modelNext *bool) bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	start := s.i + 1
	esc, ok := s.str()
	if !ok {
		return false
	}
	if top {
		if k := s.b[start : s.i-1]; esc || !ascii(k) {
			s.unusual = true
		} else {
			*modelNext = bytes.EqualFold(k, []byte("model"))
		}
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	return true
}

// Eight bytes at a time: a word has one of '"', '\\' or a control
// character when special reports true (it may also report true for a
// word that has none; never the other way round).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func special(x uint64) bool {
	q := x ^ (ones * '"')
	e := x ^ (ones * '\\')
	return ((q-ones)&^q|(e-ones)&^e|(x-ones*0x20)&^x)&highs != 0
}

// str reads a string starting at its opening quote, and reports whether it
// had an escape. (json.Valid checks escapes and control characters, not
// UTF-8.)
func (s *jsonScan) str() (esc, ok bool) {
	b := s.b
	i := s.i + 1
	for {
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return esc, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return esc, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !hex4(b[i+2:i+6]) {
					return esc, false
				}
				i += 6
			default:
				return esc, false
			}
		case c < 0x20:
			return esc, false
		default:
			i++
		}
	}
}

func hex4(h []byte) bool {
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func (s *jsonScan) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
