package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/lane"
)

// checkLeaks fails the test if it leaves goroutines running; call it first.
func checkLeaks(t *testing.T) { leakcheck.Check(t) }

// lanesOf fetches GET /governor/lanes.
func lanesOf(t *testing.T, c *http.Client, base string) []lane.Info {
	t.Helper()
	resp, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []lane.Info }
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

// histogramOf returns the count and the sum of the histogram name of lane
// id in set, as a scrape shows them.
func histogramOf(t *testing.T, set *metrics.Set, name, id string) (count int, sum float64) {
	t.Helper()
	var b strings.Builder
	set.WritePrometheus(&b)
	out := b.String()
	value := func(suffix string) string {
		prefix := fmt.Sprintf("%s_%s{lane=%q} ", name, suffix, id)
		for line := range strings.Lines(out) {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no %s in:\n%s", strings.TrimSpace(prefix), out)
		return ""
	}
	count, err := strconv.Atoi(value("count"))
	require.NoError(t, err)
	sum, err = strconv.ParseFloat(value("sum"), 64)
	require.NoError(t, err)
	return count, sum
}

// redisOf returns whether GET /governor/lanes says Redis coordination is
// up, or nil when it shows no Redis status.
func redisOf(t *testing.T, c *http.Client, base string) *bool {
	t.Helper()
	resp, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Redis *struct {
			Up bool `json:"up"`
		} `json:"redis"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	if out.Redis == nil {
		return nil
	}
	return &out.Redis.Up
}
