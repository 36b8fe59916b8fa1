package proxy

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stalledListener accepts connections and never answers on them, as a
// server whose process no longer accepts does while the kernel still
// completes the TCP handshakes.
func stalledListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// An HTTPS upstream that takes the connection but never answers its TLS
// handshake is an upstream that could not be reached: the handshake is
// bounded by the connect timeout, like the dial, however long an attempt
// may take.
func TestStalledTLSHandshakeEndsAtTheConnectTimeout(t *testing.T) {
	checkLeaks(t)
	addr := stalledListener(t)
	_, base := startProxy(t, fastRetries(Config{
		Upstream:       mustURL(t, "https://"+addr),
		ConnectTimeout: 200 * time.Millisecond,
		AttemptTimeout: time.Hour,
		MaxRetries:     1,
	}))
	c := client(t)
	c.Timeout = 30 * time.Second // only so that a call left hanging fails the test
	resp, body := chat(t, c, base, nil)
	require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, body)
	assert.Contains(t, body, `"code":"upstream_timeout"`)
	assert.Equal(t, string(StatusFailed), resp.Header.Get(HeaderStatus))
	assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
}
