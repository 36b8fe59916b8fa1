package proxy

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterOf returns the value of the sample named exactly sample (labels
// included) in set, as a scrape shows it; -1 if there is none.
func counterOf(t *testing.T, set *metrics.Set, sample string) float64 {
	t.Helper()
	var b strings.Builder
	set.WritePrometheus(&b)
	for line := range strings.Lines(b.String()) {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// An upstream that refuses connections: a forwarded call and a batch item
// (a Call of Do) each end with Governor's upstream_unreachable, and
// governor_errors_total counts each once, under its code.
func TestErrorsAreCountedByCode(t *testing.T) {
	checkLeaks(t)
	// Port 1 (tcpmux): nothing listens there, and no test can take it
	// meanwhile, as another test's listener can take a port just freed.
	dead := "http://127.0.0.1:1"
	set := newSet()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, dead), MaxRetries: 1, Metrics: set}))
	c := client(t)
	unreachable := `governor_errors_total{code="upstream_unreachable"}`
	require.Equal(t, 0.0, counterOf(t, set, unreachable), "every code's series is there from the start")

	resp, body := chat(t, c, base, nil)
	assert.Equal(t, 502, resp.StatusCode, body)
	assert.Contains(t, body, CodeUpstreamUnreachable)
	assert.Equal(t, 1.0, counterOf(t, set, unreachable), "the forwarded call")

	res := p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"model":"m"}`), MaxRetries: 1})
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeUpstreamUnreachable, res.Err.Code)
	assert.Equal(t, 2.0, counterOf(t, set, unreachable), "and the batch item")
	assert.Equal(t, 0.0, counterOf(t, set, `governor_errors_total{code="other"}`))

	resp, err := c.Get(base + "/governor/nowhere")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)
	assert.Equal(t, 1.0, counterOf(t, set, `governor_errors_total{code="not_found"}`))
}

// governor_client_connections counts the client connections open, and
// governor_client_connections_max shows the bound in force.
func TestClientConnectionsAreReported(t *testing.T) {
	checkLeaks(t)
	set := newSet()
	_, base := startProxy(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), MaxConnections: 5, Metrics: set})
	assert.EqualValues(t, 5, counterOf(t, set, "governor_client_connections_max"))
	conns := make([]net.Conn, 3)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		require.NoError(t, err)
		conns[i] = c
	}
	require.Eventually(t, func() bool { return counterOf(t, set, "governor_client_connections") == 3 },
		5*time.Second, time.Millisecond)
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool { return counterOf(t, set, "governor_client_connections") == 0 },
		5*time.Second, time.Millisecond)
}
