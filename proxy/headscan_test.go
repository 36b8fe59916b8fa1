package proxy

import (
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
