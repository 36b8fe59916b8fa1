package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// headScan finds the same bare LF, or none, however the head is split
// across reads, and stops at the head's end.
func TestHeadScanAtEverySplit(t *testing.T) {
	for _, tc := range []struct {
		head   string
		bareLF bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"\r\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", false},                      // empty lines before the request line
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody\n\nmore\n", false},              // the body is not scanned
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\nHost: x\n\n", false}, // nor what follows
		{"GET / HTTP/1.1\nHost: x\n\n", true},
		{"GET / HTTP/1.1\r\nHost: x\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\n", true},
		{"GET / HTTP/1.1\r\nA: b\rc\r\nHost: x\nB: c\r\n\r\n", true},
		{"GET / HTTP/1.0\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r", false}, // not yet ended
	} {
		for i := 0; i <= len(tc.head); i++ {
			var s headScan
			s.start()
			s.scan([]byte(tc.head[:i]))
			s.scan([]byte(tc.head[i:]))
			assert.Equal(t, tc.bareLF, s.bareLF, "%q split at %d", tc.head, i)
		}
	}
}

// A client connection's scan follows the requests pipelined in its bytes,
// past each body of known length, however they are split across reads,
// and names the request whose head has a bare LF; a body framed otherwise
// ends it.
func TestHeadScanFollowsPipelinedRequests(t *testing.T) {
	const good = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		stream string
		req    uint64 // the request whose head has a bare LF; 0 for none
	}{
		{good + good, 0},
		{good + "GET / HTTP/1.1\nHost: x\n\n", 2},
		{good + good + "\r\nGET / HTTP/1.1\r\nHost: x\n\r\n", 3},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\na\n\nb\n" + good, 0},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\na\n\nb\n" + "GET / HTTP/1.1\nHost: x\n\n", 2},
		{"POST / HTTP/1.1\r\ncontent-length:\t5 \r\n\r\na\n\nb\n" + "GET / HTTP/1.1\nHost: x\n\n", 2},
		{"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 2},
		// Chunked: chunk by chunk, bare LFs in their data, extensions,
		// sizes in hex and the trailer's lines.
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 2},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nA;x=\"1\"\r\n\n\n\n\n\n\n\n\n\n\n\r\n0\r\nT: 1\r\n\r\n" + good + "GET / HTTP/1.1\nHost: x\n\n", 3},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n0\r\n\r\n" + good, 0},
		// Framed otherwise: what follows is not scanned.
		{"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n1\r\na\r\n0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1x\r\na\r\n0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\na\n\nb\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\na\n\nb\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
		{"POST / HTTP/1.1\r\nContent-Length: " + strings.Repeat("0", 40) + "5\r\n\r\na\n\nb\n" + "GET / HTTP/1.1\nHost: x\n\n", 0},
	} {
		for i := 0; i <= len(tc.stream); i++ {
			var s headScan
			s.handled = 4 // requests before, on the connection
			s.startRequest()
			s.scan([]byte(tc.stream[:i]))
			s.scan([]byte(tc.stream[i:]))
			want := uint64(0)
			if tc.req > 0 {
				want = 4 + tc.req
			}
			if !assert.Equal(t, want, s.bareLFReq, "%q split at %d", tc.stream, i) {
				break
			}
			assert.Equal(t, tc.req > 0, s.bareLF)
			assert.False(t, s.refuses(5) && tc.req != 1, "the first request is not refused for a later head")
		}
	}
}
