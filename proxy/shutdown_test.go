package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Shutdown that follows "go p.Serve(ln)" at once (a SIGTERM during
// startup) stops that Serve, even when its goroutine had not yet reached
// fasthttp: Serve returns and the port is closed.
func TestShutdownRightAfterServeStopsIt(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	for i := range 20 {
		p, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:9"), Metrics: metrics.NewSet()})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- p.Serve(ln) }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, p.Shutdown(ctx), "round %d", i)
		cancel()
		select {
		case err := <-served:
			require.NoError(t, err, "round %d", i)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Serve still running after Shutdown returned", i)
		}
		_, err = net.Dial("tcp", ln.Addr().String())
		require.Error(t, err, "round %d: the port still accepts", i)
	}
}

// Serve called after Shutdown closes its listener and returns at once.
func TestServeAfterShutdownReturnsAtOnce(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	p, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:9"), Metrics: metrics.NewSet()})
	require.NoError(t, err)
	require.NoError(t, p.Shutdown(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve accepts after Shutdown")
	}
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.Error(t, err, "the port still accepts")
}

// A client that stops reading its answer does not hold a drain past its
// time: once the drain's ctx is done and the handlers have had
// answerGrace to write what they still had to, the client connections
// still open are closed and Shutdown returns. (It waited for the write
// deadline, GOVERNOR_STREAM_IDLE_TIMEOUT, 5 minutes by default.)
func TestDrainIsNotHeldByAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	chunk := []byte("data: " + strings.Repeat("x", 16<<10) + "\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	p, err := New(Config{Upstream: mustURL(t, up.URL), StreamIdleTimeout: time.Hour, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	body := `{"model":"m","stream":true}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	require.NoError(t, err)
	head := make([]byte, 12)
	_, err = io.ReadFull(conn, head)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200", string(head), "the stream has begun; the client reads no more")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	select {
	case err := <-shut:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second):
		t.Fatal("the drain waits for a client that reads nothing")
	}
	require.NoError(t, <-served)
}
