package proxy

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/logtest"
)

// A stream framed by the close of its connection alone (no Content-Length,
// not chunked) cannot say by its bytes that it was cut: one whose events
// Governor knows and that stops before its last one ([DONE], message_stop)
// is cut visibly for the client (a read error, as for a chunked stream cut
// between chunks) and logged stream_end "cut"; one that reaches its last
// event, one ended by the provider's error event, and one of a shape
// Governor does not know end cleanly.
func TestStreamEndedByTheCloseBeforeItsLastEventIsCut(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const (
		head  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
		chunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"Hi"}}]}` + "\n\n"
		start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\"}}\n\n"
		delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n"
	)
	for _, tc := range []struct {
		name, events, end string
	}{
		{"OpenAI, closed before [DONE]", chunk + chunk, "cut"},
		{"OpenAI, closed half way through an event", chunk + `data: {"id":"c1","obj`, "cut"},
		{"Anthropic, closed before message_stop", start + delta, "cut"},
		{"OpenAI, [DONE] then the close", chunk + "data: [DONE]\n\n", "done"},
		{"OpenAI, [DONE] without its line end", chunk + "data: [DONE]", "done"},
		{"Anthropic, message_stop then the close", start + delta + "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "done"},
		{"Anthropic, ended by an overload", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "overloaded_error"},
		{"a shape Governor does not know", "data: hello\n\n", "done"},
	} {
		up := cuttingUpstream(t, func(c *net.TCPConn, _ int) { io.WriteString(c, head+tc.events) })
		var logs logtest.Buffer
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), AccessLog: slog.New(slog.NewJSONHandler(&logs, nil))}))
		resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, tc.name)
		assert.Equal(t, tc.events, string(body), "%s: the events arrive as sent", tc.name)
		if tc.end == "cut" {
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s: the client sees the cut", tc.name)
		} else {
			assert.NoError(t, err, tc.name)
		}
		require.Eventually(t, func() bool { return len(logs.Lines(t, "call")) == 1 }, 5*time.Second, time.Millisecond, tc.name)
		assert.Equal(t, tc.end, logs.Lines(t, "call")[0]["stream_end"], tc.name)
	}
}
