package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingListener counts the writes made to the connections it accepts.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// An upstream that sends many events at once costs the client a few writes,
// not one per event (nginx's behaviour: what one read brought, one write).
func TestStreamBurstIsCoalesced(t *testing.T) {
	checkLeaks(t)
	const events = 40
	var want strings.Builder
	for i := range events {
		want.WriteString("data: {\"i\":" + strings.Repeat("7", i%5+1) + "}\n\n")
	}
	// The upstream sends every event as a chunk of its own, all in one
	// write, and then leaves the connection to be reused.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer upLn.Close()
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		conn, err := upLn.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		var out strings.Builder
		out.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range strings.SplitAfter(want.String(), "\n\n") {
			if ev != "" {
				fmt.Fprintf(&out, "%x\r\n%s\r\n", len(ev), ev)
			}
		}
		out.WriteString("0\r\n\r\n")
		_, _ = io.WriteString(conn, out.String())
		_, _ = br.ReadByte() // until the proxy closes its idle connection
	}()

	p, err := New(fastRetries(Config{Upstream: mustURL(t, "http://"+upLn.Addr().String()), Metrics: metrics.NewSet()}))
	require.NoError(t, err)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &countingListener{Listener: tcp}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, p.Shutdown(ctx))
		<-done
		<-upDone
	}()

	c := client(t)
	resp, err := c.Post("http://"+tcp.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, want.String(), string(body))
	// Headers, the burst (perhaps split by the upstream's reads), the last
	// chunk and the end of the chunked body.
	t.Logf("%d writes", ln.writes.Load())
	assert.LessOrEqual(t, ln.writes.Load(), int64(8), "writes to the client for %d events sent at once", events)
}
