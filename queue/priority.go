package queue

// Urgencies is the number of urgency levels of RFC 9218: 0 (most urgent)
// to 7 (least urgent).
const Urgencies = 8

// DefaultUrgency is the urgency of a call that states none (RFC 9218,
// section 4.1).
const DefaultUrgency = 3

// Priority says where a call waits in the queue.
type Priority struct {
	// Urgency is 0 (most urgent) to 7, as in RFC 9218; Acquire clamps
	// values outside that range. Note that the zero Priority is urgency 0,
	// the most urgent: use DefaultUrgency or ParsePriority for calls that
	// state none.
	Urgency int
	// Retry marks a call that failed and is tried again. It goes ahead of
	// the fresh calls of its urgency (not of more urgent ones) and may use
	// the queue's retry reserve.
	Retry bool
	// Tenant names whose share of the lane the call takes: within one
	// urgency, the tenants with fresh calls waiting share the slots (see
	// Acquire). The zero value is the tenant "", shared by every call that
	// names none. The queue does not check names; the caller bounds them.
	Tenant string
}

// ParsePriority returns the urgency in an HTTP Priority header value (RFC
// 9218), such as "u=0", "u=5, i" or "i, u=2". It returns DefaultUrgency
// when the header is empty, has no urgency, has an urgency that is not an
// integer from 0 to 7, or is not a valid Structured Fields dictionary (RFC
// 9651; a field that does not parse is ignored as a whole, as RFC 9651
// requires). Whitespace around members, parameters, the incremental
// parameter ("i", "i=?1") and unknown members are accepted; when "u"
// appears more than once the last one counts. ParsePriority does not
// allocate.
func ParsePriority(header []byte) int {
	p := sfParser{b: header}
	p.trim()
	if p.eof() {
		return DefaultUrgency
	}
	u := DefaultUrgency
	for {
		isU, ok := p.key()
		if !ok {
			return DefaultUrgency
		}
		v := int64(-1) // -1: the member's value is not an integer
		if p.consume('=') {
			if p.peek() == '(' {
				ok = p.innerList()
			} else {
				var isInt bool
				var n int64
				n, isInt, ok = p.bareItem()
				if isInt {
					v = n
				}
			}
			if !ok {
				return DefaultUrgency
			}
		} // else the value is Boolean true
		if !p.params() {
			return DefaultUrgency
		}
		if isU {
			// Out-of-range or non-integer urgencies are ignored
			// (RFC 9218, section 4.1): the default applies.
			u = DefaultUrgency
			if v >= 0 && v < Urgencies {
				u = int(v)
			}
		}
		p.skipOWS()
		if p.eof() {
			return u
		}
		if !p.consume(',') {
			return DefaultUrgency
		}
		p.skipOWS()
		if p.eof() { // trailing comma
			return DefaultUrgency
		}
	}
}

// sfParser is a validating, non-allocating reader of RFC 9651 Structured
// Fields. It keeps only what ParsePriority needs: whether a key is "u" and
// the value of an Integer.
type sfParser struct {
	b []byte
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.b) }

// peek returns the next byte, or 0 at the end of input.
func (p *sfParser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.b[p.i]
}

func (p *sfParser) consume(c byte) bool {
	if !p.eof() && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// trim drops leading and trailing SP and HTAB: HTTP parsers strip that
// whitespace from field values, and a caller may not have.
func (p *sfParser) trim() {
	for len(p.b) > 0 && isOWS(p.b[len(p.b)-1]) {
		p.b = p.b[:len(p.b)-1]
	}
	p.skipOWS()
}

func (p *sfParser) skipOWS() {
	for !p.eof() && isOWS(p.b[p.i]) {
		p.i++
	}
}

func (p *sfParser) skipSP() {
	for !p.eof() && p.b[p.i] == ' ' {
		p.i++
	}
}

// key reads a key (lcalpha or "*", then lcalpha, DIGIT, "_", "-", ".",
// "*") and reports whether it is "u".
func (p *sfParser) key() (isU, ok bool) {
	c := p.peek()
	if !isLower(c) && c != '*' {
		return false, false
	}
	start := p.i
	p.i++
	for !p.eof() && isKeyChar(p.b[p.i]) {
		p.i++
	}
	return p.i-start == 1 && c == 'u', true
}

// params reads zero or more parameters: ";" *SP key [ "=" bare-item ].
func (p *sfParser) params() bool {
	for p.consume(';') {
		p.skipSP()
		if _, ok := p.key(); !ok {
			return false
		}
		if p.consume('=') {
			if _, _, ok := p.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

// innerList reads "(" *SP [ item *( 1*SP item ) *SP ] ")", without the
// parameters that follow it.
func (p *sfParser) innerList() bool {
	p.i++ // "("
	for {
		p.skipSP()
		if p.consume(')') {
			return true
		}
		if _, _, ok := p.bareItem(); !ok {
			return false
		}
		if !p.params() {
			return false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return false
		}
	}
}

// bareItem reads one bare item and returns its value if it is an Integer.
func (p *sfParser) bareItem() (n int64, isInt, ok bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return 0, false, p.str()
	case c == '*' || isAlpha(c):
		p.token()
		return 0, false, true
	case c == ':':
		return 0, false, p.byteSeq()
	case c == '?':
		p.i++
		c = p.peek()
		ok = c == '0' || c == '1'
		p.i++
		return 0, false, ok
	case c == '@': // Date: "@" Integer
		p.i++
		_, isInt, ok = p.number()
		return 0, false, ok && isInt
	case c == '%':
		return 0, false, p.displayString()
	}
	return 0, false, false
}

// number reads an Integer (up to 15 digits) or a Decimal (up to 12 digits,
// ".", 1 to 3 digits).
func (p *sfParser) number() (n int64, isInt, ok bool) {
	neg := p.consume('-')
	start := p.i
	for !p.eof() && isDigit(p.b[p.i]) {
		if p.i-start == 15 {
			return 0, false, false
		}
		n = n*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 {
		return 0, false, false
	}
	if p.consume('.') {
		if digits > 12 {
			return 0, false, false
		}
		frac := p.i
		for !p.eof() && isDigit(p.b[p.i]) {
			p.i++
		}
		if d := p.i - frac; d < 1 || d > 3 {
			return 0, false, false
		}
		return 0, false, true
	}
	if neg {
		n = -n
	}
	return n, true, true
}

// str reads a String: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
func (p *sfParser) str() bool {
	p.i++ // DQUOTE
	for !p.eof() {
		c := p.b[p.i]
		p.i++
		switch {
		case c == '\\':
			if c := p.peek(); c != '"' && c != '\\' {
				return false
			}
			p.i++
		case c == '"':
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// token reads a Token: ( ALPHA / "*" ) *( tchar / ":" / "/" ).
func (p *sfParser) token() {
	p.i++
	for !p.eof() && (isTchar(p.b[p.i]) || p.b[p.i] == ':' || p.b[p.i] == '/') {
		p.i++
	}
}

// byteSeq reads a Byte Sequence: ":" *base64 ":".
func (p *sfParser) byteSeq() bool {
	p.i++ // ":"
	for !p.eof() {
		c := p.b[p.i]
		p.i++
		switch {
		case c == ':':
			return true
		case isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=':
		default:
			return false
		}
	}
	return false
}

// displayString reads a Display String: "%" DQUOTE *( unescaped / "%"
// 2lc-hexdig ) DQUOTE. The UTF-8 validity of the decoded bytes is not
// checked: the value is never used.
func (p *sfParser) displayString() bool {
	p.i++ // "%"
	if !p.consume('"') {
		return false
	}
	for !p.eof() {
		c := p.b[p.i]
		p.i++
		switch {
		case c == '%':
			if p.i+2 > len(p.b) || !isLowerHex(p.b[p.i]) || !isLowerHex(p.b[p.i+1]) {
				return false
			}
			p.i += 2
		case c == '"':
			return true
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

func isOWS(c byte) bool      { return c == ' ' || c == '\t' }
func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isLower(c byte) bool    { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool    { return isLower(c) || 'A' <= c && c <= 'Z' }
func isLowerHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' }

func isKeyChar(c byte) bool {
	return isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
