package batch_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/lane"
	"github.com/llmgovernor/governor/proxy"
)

// tenants returns the names of the tenants with calls in any lane.
func (e *env) tenants(t *testing.T) []string {
	t.Helper()
	resp, err := e.c.Get(e.base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []lane.Info }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	var names []string
	for _, l := range out.Lanes {
		for _, ti := range l.Tenants {
			names = append(names, ti.Tenant)
		}
	}
	slices.Sort(names)
	return names
}

// An async job names its tenant, takes the request's X-Governor-Tenant, or
// is a tenant of its own.
func TestJobTenants(t *testing.T) {
	e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.AIMD = aimd.Config{Max: 1} }})
	slow := map[string]string{"X-Mock-Latency": "10s"} // until cancelled
	items := []any{chatItem("a", "x", slow), chatItem("b", "y", slow), chatItem("c", "z", slow)}
	own := e.createJob(t, mustJSON(t, map[string]any{"requests": items}))
	named := e.createJob(t, mustJSON(t, map[string]any{"requests": items, "tenant": "team-x"}))
	resp, out := e.post(t, batch.PathBatches, "application/json", mustJSON(t, map[string]any{"requests": items}),
		proxy.HeaderTenant, "team-y")
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	var fromHeader batch.JobStatus
	require.NoError(t, json.Unmarshal([]byte(out), &fromHeader))

	require.Eventually(t, func() bool {
		return slices.Equal(e.tenants(t), []string{own.ID, "team-x", "team-y"})
	}, 10*time.Second, 5*time.Millisecond, "every job's items wait or run under its tenant")
	for _, id := range []string{own.ID, named.ID, fromHeader.ID} {
		resp, out := e.do(t, http.MethodDelete, batch.PathBatches+"/"+id, "", "")
		require.Equal(t, http.StatusAccepted, resp.StatusCode, out)
	}
}

func TestBadTenantOption(t *testing.T) {
	e := newEnv(t, envOptions{})
	items := []any{chatItem("a", "x", nil)}
	for _, tc := range []struct{ name, path, contentType, body string }{
		{"json option", batch.PathBatch, "application/json", mustJSON(t, map[string]any{"requests": items, "tenant": "a b"})},
		{"empty", batch.PathBatch, "application/json", mustJSON(t, map[string]any{"requests": items, "tenant": ""})},
		{"query option", batch.PathBatch + "?tenant=(other)", "application/jsonl",
			`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`},
		{"item header", batch.PathBatch, "application/json",
			mustJSON(t, map[string]any{"requests": []any{chatItem("a", "x", map[string]string{"X-Governor-Tenant": "team-a"})}})},
	} {
		resp, out := e.post(t, tc.path, tc.contentType, tc.body)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.name)
		assert.Contains(t, strings.ToLower(out), "tenant", tc.name)
		assert.NotContains(t, strings.ToLower(out), "tenant: tenant", tc.name)
	}
	resp, out := e.post(t, batch.PathBatches, "application/json", mustJSON(t, map[string]any{"requests": items}),
		proxy.HeaderTenant, "no spaces please")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, out, proxy.HeaderTenant)
	assert.Contains(t, out, `X-Governor-Tenant: \"no spaces please\": only letters`)

	// A batch sent with two different tenants: which one was meant is unknown.
	req, err := http.NewRequest(http.MethodPost, e.base+batch.PathBatches, strings.NewReader(mustJSON(t, map[string]any{"requests": items})))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header[proxy.HeaderTenant] = []string{"team-a", "team-b"}
	resp, err = e.c.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	assert.Contains(t, string(b), "X-Governor-Tenant: sent 2 times with different values")
	assert.Zero(t, e.mock.Stats().Received, "nothing ran")
}
