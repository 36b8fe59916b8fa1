package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upstream that closes idle keep-alive connections sooner than Governor
// drops them (uvicorn, behind vLLM, after 5 s; Node's http server after
// 5 s) costs a call nothing: the connection it closed is not used again,
// so the call after an idle gap is sent once, on a new connection, instead
// of failing an attempt (a connection error, a backoff, a retry; with no
// retries, a 502).
func TestConnectionsTheUpstreamClosedAreNotReused(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) { testStaleConnection(t, tls) })
	}
}

func testStaleConnection(t *testing.T, withTLS bool) {
	checkLeaks(t)
	var requests atomic.Int64
	closed := make(chan struct{}, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x"}`))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	cfg := Config{}
	if withTLS {
		up.StartTLS()
		pool := x509.NewCertPool()
		pool.AddCert(up.Certificate())
		cfg.TLSConfig = &tls.Config{RootCAs: pool}
	} else {
		up.Start()
	}
	t.Cleanup(up.Close)
	cfg.Upstream = mustURL(t, up.URL)
	p, base := startProxy(t, cfg)
	c := client(t)

	resp, _ := chat(t, c, base, map[string]string{"X-Governor-Max-Retries": "0"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	up.Config.SetKeepAlivesEnabled(false) // closes the idle connection now
	<-closed
	// Once its close has reached Governor's end of the connection (a FIN,
	// after a TLS close_notify), the next call must not be written to it.
	require.Eventually(t, func() bool {
		conns := p.router.def.openConns()
		if len(conns) != 1 {
			return false
		}
		waiting, gone := peek(conns[0].Conn)
		return gone || withTLS && waiting
	}, 10*time.Second, time.Millisecond)

	resp, out := chat(t, c, base, map[string]string{"X-Governor-Max-Retries": "0"})
	assert.Equal(t, http.StatusOK, resp.StatusCode, out)
	assert.Equal(t, "1", resp.Header.Get("X-Governor-Attempts"))
	assert.Equal(t, "COMPLETED", resp.Header.Get("X-Governor-Status"))
	assert.EqualValues(t, 2, requests.Load(), "each call sent once")
}
