package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upstream that answers "101 Switching Protocols" to a call that asked
// for no upgrade (Governor forwards no Upgrade header) has stopped
// speaking HTTP on that connection: it is no answer. The attempt is a
// connection error, retried like a malformed answer; the client never
// sees a 101, and the connection carries no other call (what the
// upstream sends on it next is not an answer to anyone).
func TestUnaskedUpgradeIsNoAnswer(t *testing.T) {
	checkLeaks(t)
	const fake = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"fake\":true}\n"
	const switched = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	const ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"ok\"}"

	t.Run("retried", func(t *testing.T) {
		up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
			if n > 1 {
				io.WriteString(c, ok)
				return
			}
			io.WriteString(c, switched)
			// Whatever comes next on the switched connection is
			// another protocol's: here, bytes that would pass for
			// the answer to a request sent on it.
			if readRequest(br) == nil {
				io.WriteString(c, fake)
			}
		})
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
		c := client(t)
		resp, body := chat(t, c, base, nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		assert.Equal(t, `{"id":"ok"}`, body)
		assert.Equal(t, "COMPLETED_WITH_RETRIES", resp.Header.Get(HeaderStatus))
		assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))

		resp, body = chat(t, c, base, nil)
		assert.Equal(t, `{"id":"ok"}`, body, "the next call gets its own answer")
		assert.Equal(t, "1", resp.Header.Get(HeaderAttempts))
	})

	t.Run("every time", func(t *testing.T) {
		up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
			io.WriteString(c, switched)
		})
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
		resp, body := chat(t, client(t), base, map[string]string{HeaderMaxRetries: "1"})
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
		assert.Contains(t, body, `"code":"upstream_unreachable"`)
		assert.Contains(t, body, "101 Switching Protocols")
		assert.Equal(t, "FAILED", resp.Header.Get(HeaderStatus))
		assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	})
}
