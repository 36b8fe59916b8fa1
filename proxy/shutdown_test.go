package proxy

import (
	"context"
	"net"
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
