package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmgovernor/governor/lane"
)

// What a stream's bytes come to, keep-alives or content, whatever the
// reads they arrive in; and the watch that tells them finds the stream's
// last event and an error event in the same pass.
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
		{"data: {\"type\": \"ping\"" + strings.Repeat(" ", 60) + "}\n", true},
		{": " + strings.Repeat("x", maxEventLine+100) + "\n", true}, // longer than the watch keeps
	} {
		for n := 1; n <= len(tc.stream); n++ {
			var k overloadWatch
			got := false
			for s := tc.stream; len(s) > 0; {
				m := min(n, len(s))
				got = k.write([]byte(s[:m])) || got
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
	for _, long := range []int{100, 2 * maxEventLine} { // kept by the watch, or too long for it
		var k overloadWatch
		assert.True(t, k.write([]byte("data: "+strings.Repeat("a", long))))
		for range 3 {
			assert.True(t, k.write([]byte("bbb")), "the rest of the long line")
		}
		assert.True(t, k.write([]byte("b\n")), "its end")
		assert.False(t, k.write([]byte(": keep-alive\n\n")), "then a keep-alive")
		assert.False(t, k.write([]byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")), "and a ping")
	}
}

// One pass tells a stream's keep-alives from its content and finds its
// last event, or the error that ended it, whatever the reads it arrives
// in: the keep-alives between its events change neither.
func TestOneWatchTellsKeepAlivesAndHowAStreamEnded(t *testing.T) {
	chunk := "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n"
	for _, tc := range []struct {
		name, stream string
		want         lane.Outcome
	}{
		{"whole", ": keep-alive\n\n" + chunk + ": keep-alive\n\n" + chunk + "data: [DONE]\n\n", lane.Answered},
		{"cut", chunk + ": keep-alive\n\n" + chunk, lane.ConnError},
		{"overloaded", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n" + anthropicOverloadEvent, lane.RateLimited},
	} {
		for _, size := range []int{1, 5, 64, len(tc.stream)} {
			var w overloadWatch
			content := false
			for s := tc.stream; s != ""; {
				n := min(size, len(s))
				content = w.write([]byte(s[:n])) || content
				s = s[n:]
			}
			w.write(lineEnd)
			got, _ := w.outcome()
			assert.Equal(t, tc.want, got, "%s, reads of %d bytes", tc.name, size)
			assert.True(t, content, "%s, reads of %d bytes", tc.name, size)
		}
	}
}
