package usage

import (
	"bytes"
	"strconv"
)

var usageKey = []byte(`"usage"`)

// scan records every usage object in b. It returns the offset of the last
// "usage" key whose value b cuts short (a Stream keeps b from there and
// scans again once more has arrived), or -1. pre is whether an odd number
// of backslashes comes just before b (in an earlier piece of a stream).
func (r *report) scan(b []byte, pre bool) int {
	cut := -1
	for i := 0; ; {
		k := bytes.Index(b[i:], usageKey)
		if k < 0 {
			return cut
		}
		k += i
		i = k + len(usageKey)
		if escaped(b, k, pre) {
			// \"usage\" inside a string, such as a model's text.
			continue
		}
		j := skipSpace(b, i)
		if j == len(b) {
			return k
		}
		if b[j] != ':' {
			// A string value "usage", not a key.
			continue
		}
		j = skipSpace(b, j+1)
		if j == len(b) {
			return k
		}
		if b[j] != '{' {
			// null, as in the chunks before the last of an OpenAI stream.
			continue
		}
		end := skipValue(b, j)
		if end < 0 {
			return k
		}
		r.object(b[j:end], 0)
		i = end
	}
}

// escaped reports whether the quote at b[k] is escaped, that is preceded by
// an odd number of backslashes; pre is whether an odd number comes just
// before b.
func escaped(b []byte, k int, pre bool) bool {
	n := 0
	for i := k - 1; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return (n%2 == 1) != (n == k && pre)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the offset just past the object or array that starts at
// b[i], or -1 when b ends first. It checks nothing but nesting and strings.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			if i < 0 {
				return -1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// skipString returns the offset of the quote that closes the string opening
// at b[i], or -1 when b ends first.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// object records the counts of one usage object, obj being a complete
// {...} (nesting and strings balanced). Within a *_tokens_details object
// (depth 1) only cached_tokens counts.
func (r *report) object(obj []byte, depth int) {
	for i := 1; i < len(obj); {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return // '}' or not JSON
		}
		end := skipString(obj, i)
		if end < 0 {
			return
		}
		key := obj[i+1 : end]
		i = skipSpace(obj, end+1)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipSpace(obj, i+1)
		if i >= len(obj) {
			return
		}
		var next int
		switch obj[i] {
		case '{', '[':
			next = skipValue(obj, i)
			if next < 0 {
				return
			}
			if depth == 0 && obj[i] == '{' && (string(key) == "prompt_tokens_details" || string(key) == "input_tokens_details") {
				r.object(obj[i:next], 1)
			}
		case '"':
			next = skipString(obj, i)
			if next < 0 {
				return
			}
			next++
		default:
			next = i
			for next < len(obj) && obj[next] != ',' && obj[next] != '}' && obj[next] != ' ' && obj[next] != '\n' && obj[next] != '\r' && obj[next] != '\t' {
				next++
			}
			if f := field(key, depth); f >= 0 {
				if v, ok := count(obj[i:next]); ok {
					r.put(f, v)
				}
			}
		}
		i = skipSpace(obj, next)
		if i < len(obj) && obj[i] == ',' {
			i++
		}
	}
}

// field returns the field a key names at the given depth, or -1.
func field(key []byte, depth int) int {
	if depth > 0 {
		if string(key) == "cached_tokens" {
			return fCachedTokens
		}
		return -1
	}
	switch string(key) {
	case "prompt_tokens":
		return fPromptTokens
	case "completion_tokens":
		return fCompletionTokens
	case "input_tokens":
		return fInputTokens
	case "output_tokens":
		return fOutputTokens
	case "cache_creation_input_tokens":
		return fCacheCreation
	case "cache_read_input_tokens":
		return fCacheRead
	}
	return -1
}

// count parses a JSON number that is a whole count of tokens: 12, or 12.0,
// or 1.2e1. Anything else (negative, fractional, too large, not a number)
// is not a count.
func count(lit []byte) (int64, bool) {
	if v, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
		return v, v >= 0 && v <= maxCount
	}
	if len(lit) == 0 || (lit[0] != '-' && (lit[0] < '0' || lit[0] > '9')) {
		return 0, false // also keeps out "Inf", "NaN" and "0x1p3"
	}
	v, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || v < 0 || v > maxCount || v != float64(int64(v)) {
		return 0, false
	}
	return int64(v), true
}
