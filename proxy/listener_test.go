package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusalForTest stands for the 503 the listener answers beyond its cap.
var refusalForTest = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy")

// cappedListener listens on loopback with room for one connection, which
// it accepts and holds; accepting starts taking (so refusing) the
// connections after it. The listener is closed when the test ends, or by
// closeListener.
type cappedListener struct {
	addr   string
	ln     *drainListener
	wg     sync.WaitGroup
	client net.Conn
	held   net.Conn
}

func newCappedListener(t *testing.T, lingerFor time.Duration, maxLingering int) *cappedListener {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &cappedListener{addr: tl.Addr().String()}
	l.ln = listenerFor(tl, nil, 1, refusalForTest, nil).(*drainListener)
	l.ln.lingerFor = lingerFor
	l.ln.maxLingering = maxLingering
	l.client, err = net.Dial("tcp", l.addr)
	require.NoError(t, err)
	l.held, err = l.ln.Accept()
	require.NoError(t, err)
	t.Cleanup(l.closeListener)
	return l
}

func (l *cappedListener) accepting() {
	l.wg.Go(func() {
		for {
			c, err := l.ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	})
}

func (l *cappedListener) closeListener() {
	_ = l.ln.Close()
	l.wg.Wait()
	_ = l.held.Close()
	_ = l.client.Close()
}

// requestWithBody is a call whose body (bodyBytes) is more than the
// kernel buffers while nobody reads it.
func requestWithBody(bodyBytes int) []byte {
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", bodyBytes)
	return append([]byte(head), bytes.Repeat([]byte("x"), bodyBytes)...)
}

// A client refused beyond the cap reads the refusal even when its request
// was still being sent: the listener drains what the client sends instead
// of closing on unread bytes, which Linux answers with a reset that fails
// the client's write and discards the refusal.
func TestRefusedClientStillSendingReadsTheRefusal(t *testing.T) {
	checkLeaks(t)
	l := newCappedListener(t, time.Hour, maxRefusedLingering) // the clients' closes end the lingering
	l.accepting()

	const clients = 4
	req := requestWithBody(8 << 20) // kernel buffers hold ~4 MiB of it unread
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", l.addr)
			if !assert.NoError(t, err, "client %d", i) {
				return
			}
			defer c.Close()
			_, err = c.Write(req)
			assert.NoError(t, err, "client %d: sending its request", i)
			b, err := io.ReadAll(c)
			assert.NoError(t, err, "client %d: reading the answer", i)
			assert.Equal(t, string(refusalForTest), string(b), "client %d", i)
		})
	}
	wg.Wait()
}

// Closing the listener ends the lingering of refused connections whose
// clients never close, and waits for it (checkLeaks sees no drain left).
func TestCloseEndsTheLingeringOfRefusedConnections(t *testing.T) {
	checkLeaks(t)
	l := newCappedListener(t, time.Hour, maxRefusedLingering)
	l.accepting()

	readRefusal(t, l.addr)
	assert.Equal(t, 1, l.lingering(), "the refused connection is drained until its client closes")

	l.closeListener() // would wait an hour if Close did not end the drain
	assert.Zero(t, l.lingering())
}

// Refused connections beyond maxLingering are closed at once: no more than
// maxLingering hold a file descriptor after their refusal.
func TestRefusedConnectionsLingerWithinTheirBound(t *testing.T) {
	checkLeaks(t)
	l := newCappedListener(t, time.Hour, 1)
	l.accepting()

	readRefusal(t, l.addr)
	readRefusal(t, l.addr)
	assert.Equal(t, 1, l.lingering(), "the second refused connection is closed at once")
}

// readRefusal connects to addr, which refuses it, and reads the refusal;
// the connection stays open until the test ends.
func readRefusal(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	b, err := io.ReadAll(c) // the refusal, then the listener's FIN
	require.NoError(t, err)
	assert.Equal(t, string(refusalForTest), string(b))
}

// lingering counts the refused connections being drained.
func (l *cappedListener) lingering() int {
	l.ln.lingerMu.Lock()
	defer l.ln.lingerMu.Unlock()
	return len(l.ln.lingering)
}
