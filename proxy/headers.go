package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/queue"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 plus the
// historical ones that Go's httputil.ReverseProxy also strips. They describe
// one connection, not the message, so a proxy must not forward them in
// either direction. Headers named in Connection are removed too (see
// stripHopHeaders).
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by old clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// header is the subset of fasthttp.RequestHeader and fasthttp.ResponseHeader
// that hop-by-hop stripping needs, so one function serves both directions.
type header interface {
	Peek(key string) []byte
	PeekAll(key string) [][]byte
	Del(key string)
	DelBytes(key []byte)
}

var (
	_ header = (*fasthttp.RequestHeader)(nil)
	_ header = (*fasthttp.ResponseHeader)(nil)
)

// stripHopHeaders removes the hop-by-hop headers from h: every header named
// in a Connection header's comma-separated tokens, then the fixed list.
// The tokens are read before Connection itself is deleted (RFC 9110 §7.6.1).
//
// The Connection values are copied first: fasthttp's Peek results alias the
// header's storage, which Del rearranges.
func stripHopHeaders(h header) {
	if len(h.Peek(fasthttp.HeaderConnection)) > 0 { // most calls have no Connection header
		stripConnectionTokens(h)
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// stripResponseHopHeaders strips the hop-by-hop headers of an upstream
// answer (stripHopHeaders), after one pass over its headers has found
// any: most answers have none, and a lookup per name costs a pass each.
func stripResponseHopHeaders(h *fasthttp.ResponseHeader) {
	for k := range h.All() {
		if isHopHeader(k) {
			stripHopHeaders(h)
			return
		}
	}
}

// framesSkippedBody reports whether h, the head of an answer that ends at
// its head, frames a body anyway, with a Content-Length above 0 or
// Transfer-Encoding. A 204 or 304 answer, and the answer to a HEAD request
// (head), end at their heads whatever they say (RFC 9112 §6.3). A 204 that
// frames a body breaks a rule (RFC 9110 §8.6); a 304 and the answer to a
// HEAD may announce the body a GET would get. Either way, an upstream that
// sends that body would have its bytes read as the start of the next answer
// on the connection.
func framesSkippedBody(h *fasthttp.ResponseHeader, head bool) bool {
	switch h.StatusCode() {
	case fasthttp.StatusNoContent, fasthttp.StatusNotModified:
	default:
		if !head {
			return false
		}
	}
	return h.ContentLength() > 0 || h.ContentLength() == -1 || len(h.Peek(fasthttp.HeaderTransferEncoding)) > 0
}

// stripNoContentFraming removes Content-Length and Transfer-Encoding from
// a 204 answer, which must send neither (RFC 9110 §8.6, RFC 9112 §6.1).
func stripNoContentFraming(h *fasthttp.ResponseHeader) {
	if h.StatusCode() == fasthttp.StatusNoContent {
		h.Del(fasthttp.HeaderContentLength)
		h.Del(fasthttp.HeaderTransferEncoding)
	}
}

// isHopHeader reports whether name is one of hopHeaders, in any case.
func isHopHeader(name []byte) bool {
	for _, n := range hopHeaders {
		if len(name) == len(n) && bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

// rawHeaderNamed reports whether a raw header block, as fasthttp read it
// (RequestHeader.RawHeaders), may have a header named one of names, in any
// case. A line it cannot read counts as a match.
func rawHeaderNamed(raw []byte, names []string) bool {
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte{'\n'})
		name, _, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			if len(bytes.TrimSpace(line)) > 0 {
				return true
			}
			continue
		}
		name = bytes.TrimSpace(name)
		for _, n := range names {
			if len(name) == len(n) && bytes.EqualFold(name, []byte(n)) {
				return true
			}
		}
	}
	return false
}

// stripConnectionTokens removes the headers named in h's Connection
// headers. Its buffer stays on the stack: the names in it are handed to
// fasthttp's headers, which copy them, by concrete calls (a []byte passed
// through the header interface would escape, buffer and all).
func stripConnectionTokens(h header) {
	var buf [256]byte
	named := buf[:0]
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		named = append(append(named, v...), ',')
	}
	for len(named) > 0 {
		var tok []byte
		tok, named, _ = bytes.Cut(named, []byte{','})
		tok = bytes.TrimSpace(tok)
		if len(tok) == 0 || bytes.EqualFold(tok, []byte("close")) || bytes.EqualFold(tok, []byte("keep-alive")) {
			continue
		}
		switch h := h.(type) {
		case *fasthttp.RequestHeader:
			h.DelBytes(tok)
		case *fasthttp.ResponseHeader:
			h.DelBytes(tok)
		default:
			h.Del(string(tok))
		}
	}
}

// namedInConnection reports whether one of h's Connection headers names
// the header name, which stripHopHeaders would then remove.
func namedInConnection(h *fasthttp.RequestHeader, name string) bool {
	for _, v := range h.PeekAll(fasthttp.HeaderConnection) {
		for tok := range bytes.SplitSeq(v, []byte{','}) {
			if bytes.EqualFold(bytes.TrimSpace(tok), []byte(name)) {
				return true
			}
		}
	}
	return false
}

// priorityOf returns the urgency of a request's Priority field. A field
// sent on several lines is one, its lines joined by commas (RFC 9110
// §5.3), and of a dictionary's members with one key the last counts (RFC
// 9651 §3.2): the urgency a gateway appends to a client's own is the one
// that counts, as in any other reader of the field. Only a repeated field
// allocates.
func priorityOf(h *fasthttp.RequestHeader) int {
	vs := h.PeekAll(HeaderPriority)
	switch len(vs) {
	case 0:
		return queue.DefaultUrgency
	case 1:
		return queue.ParsePriority(vs[0])
	}
	return queue.ParsePriority(bytes.Join(vs, []byte(", ")))
}
