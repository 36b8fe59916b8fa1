package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

// checkLeaks fails the test if goroutines started during it are still
// running once everything it set up has been cleaned up. Call it first, so
// that its cleanup runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	base, _ := goroutines()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		n, stacks := goroutines()
		for n > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling for goroutines to end, not papering over a race
			n, stacks = goroutines()
		}
		if n > base {
			t.Errorf("%d goroutines leaked:\n%s", n-base, stacks)
		}
	})
}

// processWide are goroutines a library starts once per process and keeps,
// or that end on their own a fixed time after their owner stopped
// (fasthttp's worker pool cleaner finishes its 10s sleep after Stop).
var processWide = []string{"fasthttp.updateServerDate", "fasthttp.(*workerPool).Start.func2"}

// goroutines counts the running goroutines, process-wide ones excepted.
func goroutines() (int, string) {
	buf := make([]byte, 4<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	n := 0
	var kept []string
next:
	for _, g := range strings.Split(all, "\n\n") {
		for _, skip := range processWide {
			if strings.Contains(g, skip) {
				continue next
			}
		}
		n++
		kept = append(kept, g)
	}
	return n, strings.Join(kept, "\n\n")
}

// lanesOf fetches GET /governor/lanes.
func lanesOf(t *testing.T, c *http.Client, base string) []LaneInfo {
	t.Helper()
	resp, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []LaneInfo }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Lanes
}

// chat posts a chat completion and returns the answer, body read.
func chat(t *testing.T, c *http.Client, base string, headers map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, string(b)
}

// fastRetries keeps the backoff of tests short.
func fastRetries(cfg Config) Config {
	cfg.BackoffBase = time.Millisecond
	cfg.BackoffMax = 5 * time.Millisecond
	cfg.IdleConnTimeout = time.Second
	return cfg
}

func mustURLb(b *testing.B, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

func newSet() *metrics.Set { return metrics.NewSet() }
