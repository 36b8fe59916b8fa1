package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// What a stream's bytes come to, keep-alives or content, whatever the
// reads they arrive in.
func TestKeepAlivesTellContentFromKeepingAlive(t *testing.T) {
	for _, tc := range []struct {
		stream  string
		content bool
	}{
		{"event: ping\ndata: {\"type\": \"ping\"}\n\n", false},
		{"event:ping\r\ndata:{\"type\":\"ping\"}\r\n\r\n", false},
		{": keep-alive\n\n", false},
		{":\n\n\n", false},
		{"event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n", true},
		{"data: {\"object\":\"chat.completion.chunk\"}\n\n", true},
		{"data: [DONE]\n\n", true},
		{"{\"model\":\"llama3\",\"response\":\"Hi\",\"done\":false}\n", true}, // NDJSON
		{"event: ping\n", false},
		{"event: ping\ndata: {\"type\": \"pong\"}\n", true},
		{": " + strings.Repeat("x", 100) + "\n", true}, // longer than any keep-alive
	} {
		for n := 1; n <= len(tc.stream); n++ {
			var k keepAlives
			got := false
			for s := tc.stream; len(s) > 0; {
				m := min(n, len(s))
				got = k.content([]byte(s[:m])) || got
				s = s[m:]
			}
			if got != tc.content {
				assert.Equal(t, tc.content, got, "%q in reads of %d bytes", tc.stream, n)
				break
			}
		}
	}
}

// A line longer than any keep-alive is content in every read that carries
// a part of it: a long event (a base64 image) arriving slowly over many
// reads is never silence.
func TestKeepAlivesLongLineIsContentInEachRead(t *testing.T) {
	var k keepAlives
	assert.True(t, k.content([]byte("data: "+strings.Repeat("a", 100))))
	for range 3 {
		assert.True(t, k.content([]byte("bbb")), "the rest of the long line")
	}
	assert.True(t, k.content([]byte("b\n")), "its end")
	assert.False(t, k.content([]byte(": keep-alive\n\n")), "then a keep-alive")
}
