package proxy

import (
	"bytes"
	"encoding/json"
)

// modelOf reads the "model" field of a JSON request body, as
// json.Unmarshal into struct{ Model string } would: the last top-level key
// that matches "model" case-insensitively; empty if there is none, if it is
// not a string, or if the body is not a JSON object.
//
// It runs on every call to pick its lane, so it scans rather than decodes:
// json.Unmarshal allocates a decoder and walks into every message of the
// prompt. json.Valid (allocation-free) vouches for the syntax first, which
// leaves the scan only strings and nesting to track. Anything unusual (an
// escape or a non-ASCII byte in a model key or value) goes to json.Unmarshal.
func modelOf(body []byte) string {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' || !json.Valid(body) {
		return ""
	}
	model, found := "", false
	depth := 0
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			end := stringEnd(body, i)
			if depth == 1 && isKey(body, end) {
				key := body[i+1 : end]
				if bytes.IndexByte(key, '\\') >= 0 || !ascii(key) {
					return unmarshalModel(body) // it might unescape or fold to "model"
				}
				if bytes.EqualFold(key, []byte("model")) {
					v := bytes.TrimLeft(body[end+1:], " \t\r\n")[1:] // past the ':'
					v = bytes.TrimLeft(v, " \t\r\n")
					switch {
					case bytes.HasPrefix(v, []byte("null")):
						// json.Unmarshal leaves the field as it was.
					case v[0] != '"':
						return "" // not a string: json.Unmarshal fails
					default:
						val := v[1:stringEnd(v, 0)]
						if bytes.IndexByte(val, '\\') >= 0 || !ascii(val) {
							return unmarshalModel(body)
						}
						model, found = string(val), true
					}
				}
			}
			i = end
		}
	}
	if !found {
		return ""
	}
	return model
}

// stringEnd returns the index of the quote that closes the JSON string
// opening at body[start]. body is valid JSON.
func stringEnd(body []byte, start int) int {
	for i := start + 1; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(body) - 1
}

// isKey reports whether the string closing at end is an object key.
func isKey(body []byte, end int) bool {
	rest := bytes.TrimLeft(body[end+1:], " \t\r\n")
	return len(rest) > 0 && rest[0] == ':'
}

func ascii(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
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
