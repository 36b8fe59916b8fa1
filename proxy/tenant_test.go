package proxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/lane"
)

// tenantsOf returns the tenants of the only lane.
func tenantsOf(t *testing.T, c *http.Client, base string) []lane.TenantInfo {
	t.Helper()
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	return lanes[0].Tenants
}

// A tenant that arrives behind another's calls is not stuck behind all of
// them: the lane's next slot goes to the tenant that holds fewer.
func TestTenantsShareALane(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	var leaked sync.Map
	rec.answer = func(w http.ResponseWriter, r *http.Request, _ int) {
		if v := r.Header.Get(HeaderTenant); v != "" {
			leaked.Store(r.Header.Get("X-Request-Id"), v)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	var wg sync.WaitGroup
	send := func(id, tenant string) {
		wg.Go(func() {
			resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": id, HeaderTenant: tenant})
			assert.Equal(t, 200, resp.StatusCode, id)
		})
	}
	send("block", "team-a")
	<-rec.arrived
	for i, id := range []string{"a-1", "a-2", "a-3"} {
		send(id, "team-a")
		waitQueued(t, c, base, i+1)
	}
	send("b-1", "team-b")
	waitQueued(t, c, base, 4)
	assert.Equal(t, []lane.TenantInfo{
		{Tenant: "team-a", Queued: 3, InFlight: 1},
		{Tenant: "team-b", Queued: 1},
	}, tenantsOf(t, c, base))

	close(rec.release)
	wg.Wait()
	assert.Equal(t, []string{"block", "b-1", "a-1", "a-2", "a-3"}, rec.seen(),
		"first in, first out would have sent b-1 last")
	leaked.Range(func(k, v any) bool {
		t.Errorf("%s reached the provider with %s: %s", k, HeaderTenant, v)
		return true
	})
	assert.Empty(t, tenantsOf(t, c, base), "nothing waits or runs")
}

func TestCallsWithoutTenantShareTheDefault(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, limitOne(Config{Upstream: mustURL(t, up)}))
	c := client(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, _ := chat(t, c, base, map[string]string{"X-Request-Id": "block"})
		assert.Equal(t, 200, resp.StatusCode)
	}()
	<-rec.arrived
	assert.Equal(t, []lane.TenantInfo{{Tenant: DefaultTenant, InFlight: 1}}, tenantsOf(t, c, base))
	close(rec.release)
	<-done
}

func TestBadTenantRunsNothing(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	rec, up := newRecorder(t)
	_, base := startProxy(t, Config{Upstream: mustURL(t, up)})
	c := client(t)
	for _, name := range []string{strings.Repeat("x", MaxTenantLen+1), "team a", "(other)", "ünïcode", "a/b"} {
		resp, body := chat(t, c, base, map[string]string{HeaderTenant: name})
		assert.Equal(t, 400, resp.StatusCode, name)
		assert.Contains(t, body, HeaderTenant, name)
		assert.Equal(t, "FAILED", resp.Header.Get("X-Governor-Status"), name)
	}
	assert.Empty(t, rec.seen(), "nothing reached the provider")

	resp, _ := chat(t, c, base, map[string]string{HeaderTenant: strings.Repeat("x", MaxTenantLen)})
	assert.Equal(t, 200, resp.StatusCode, "the longest name")
	resp, _ = chat(t, c, base, map[string]string{HeaderTenant: "svc:eval-7.b_2@prod"})
	assert.Equal(t, 200, resp.StatusCode)
}

func TestValidateTenant(t *testing.T) {
	assert.NoError(t, ValidateTenant("a"))
	assert.NoError(t, ValidateTenant("job_1.x-y:z@w"))
	assert.EqualError(t, ValidateTenant(""), "want 1 to 64 characters, got 0")
	assert.EqualError(t, ValidateTenant("a b"), `"a b": only letters, digits and . _ - : @ are allowed`)
	assert.Error(t, ValidateTenant(strings.Repeat("a", 65)))
	assert.Error(t, ValidateTenant("a\x00"))
	assert.Error(t, ValidateTenant("a\nb"))
}
