package proxy

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"
)

// SingleValue returns the value of the request header field name, a field
// that holds one value, not a list (RFC 9110 §5.3: a sender does not
// repeat such a field). Repeats of the same value are accepted; repeats
// with different values are an error, since which one the client meant
// is unknown and taking the first would run the call under a setting the
// client may not have asked for. A field that is absent returns nil.
// The value is valid until the next Peek of h.
func SingleValue(h *fasthttp.RequestHeader, name string) ([]byte, error) {
	vs := h.PeekAll(name)
	if len(vs) == 0 {
		return nil, nil
	}
	for _, v := range vs[1:] {
		if !bytes.Equal(v, vs[0]) {
			return nil, fmt.Errorf("sent %d times with different values (%q, %q); send it once", len(vs), vs[0], v)
		}
	}
	return vs[0], nil
}
