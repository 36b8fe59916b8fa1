package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A canary key sent every way a client can send one never shows in logs
// (at debug level), metrics or /governor/lanes.
func TestCanaryKeyNeverLeaks(t *testing.T) {
	const canary = "sk-canary-5f0c2a7d9e"
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_ROUTES=anthropic="+mockURL,
		"GOVERNOR_LOG_LEVEL=debug", "GOVERNOR_ACCESS_LOG=true", "GOVERNOR_MAX_RETRIES=1", "GOVERNOR_BACKOFF_BASE=1ms", "GOVERNOR_BACKOFF_MAX=2ms")

	send := func(path string, h map[string]string) {
		req, _ := http.NewRequest("POST", "http://"+g.base+path, strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send("/v1/chat/completions", map[string]string{"Authorization": "Bearer " + canary})
	send("/v1/chat/completions", map[string]string{"Authorization": "Bearer " + canary, "X-Mock-Fault": "500"})
	send("/anthropic/v1/messages", map[string]string{"X-Api-Key": canary, "Anthropic-Version": "2023-06-01"})

	get := func(url string) string {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	lanes := get("http://" + g.base + "/governor/lanes")
	metricsText := get("http://" + g.admin + "/metrics")
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
	logs := g.stderr.String()

	require.Contains(t, logs, `"msg":"call"`, "the access log has a line per call")
	require.Contains(t, lanes, `"credential"`)
	for name, out := range map[string]string{"logs": logs, "metrics": metricsText, "lanes": lanes} {
		assert.NotContains(t, out, canary, name)
		assert.NotContains(t, out, canary[3:], name)
	}
}

func TestStartupLogRedactsTheAPIToken(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_API_TOKEN=tok-canary-77")
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
	logs := g.stderr.String()
	assert.Contains(t, logs, `"GOVERNOR_API_TOKEN":"set (redacted)"`)
	assert.Contains(t, logs, `"GOVERNOR_MAX_CONCURRENCY":64`)
	assert.NotContains(t, logs, "tok-canary-77")
}
