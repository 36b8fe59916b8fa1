package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/lane"
)

// A client that leaves a stream, whenever it leaves (mid-stream, an
// HTTP/1.0 client whose stream ends with its connection, or with its
// connection reset before the stream's headers could be written to it),
// gives the lane's slot back and is counted as the client's doing:
// neither a success nor a failure of the provider's, so the controller
// does not hear of it.
func TestClientLeavingAStreamIsNotTheProvidersFault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto string // the client's HTTP version
		// midStream: the client leaves once it has the stream's first
		// event; otherwise before the upstream answers.
		midStream bool
		reset     bool // the connection is reset rather than closed
	}{
		{name: "mid-stream", proto: "HTTP/1.1", midStream: true},
		{name: "HTTP/1.0 mid-stream", proto: "HTTP/1.0", midStream: true, reset: true},
		{name: "before the headers", proto: "HTTP/1.1", reset: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			got, release, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// The upstream serves the one call.
				defer close(ended)
				close(got)
				<-release
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				f := w.(http.Flusher)
				for i := 0; ; i++ {
					if _, err := fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"n\":\"event %d\"}\n\n", i); err != nil {
						return
					}
					f.Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}))
			defer up.Close()
			set := metrics.NewSet()
			_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up.URL), Metrics: set}))
			// got is closed by the upstream once it has the request, and
			// the upstream answers once release is closed.
			conn := dialCall(t, strings.TrimPrefix(base, "http://"), tc.proto)
			<-got
			if tc.midStream {
				close(release)
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					require.NoError(t, err)
					if strings.Contains(line, "event 0") {
						break
					}
				}
			}
			if tc.reset {
				resetClose(t, conn)
			} else {
				require.NoError(t, conn.Close())
			}
			if !tc.midStream {
				close(release)
			}
			<-ended
			c := client(t)
			var l lane.Info
			require.Eventually(t, func() bool {
				lanes := lanesOf(t, c, base)
				require.Len(t, lanes, 1)
				l = lanes[0]
				return l.InFlight == 0 && strings.Contains(promText(set), fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q} 1\n", l.ID, "client_gone"))
			}, 10*time.Second, 5*time.Millisecond, "the slot comes back, the attempt counted client_gone")
			prom := promText(set)
			for _, outcome := range []string{"answered", "connection_error", "timeout"} {
				assert.Contains(t, prom, fmt.Sprintf("governor_attempts_total{lane=%q,outcome=%q} 0\n", l.ID, outcome), "not the provider's doing")
			}
			assert.Zero(t, l.Decreases)
			assert.Zero(t, l.Queued)
		})
	}
}

// dialCall sends a streamed call to addr in HTTP version proto.
func dialCall(t *testing.T, addr, proto string) net.Conn {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	body := `{"model":"m","stream":true}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions %s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body)
	require.NoError(t, err)
	return conn
}

// resetClose closes conn with a reset, as a client that crashed would.
func resetClose(t *testing.T, conn net.Conn) {
	require.NoError(t, conn.(*net.TCPConn).SetLinger(0))
	require.NoError(t, conn.Close())
}
