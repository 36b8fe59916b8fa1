package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// manualClock is a clock that moves only when the test says. It starts at
// the real time, because the proxy also derives context deadlines from it.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *manualClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func bearer(key string) map[string]string      { return map[string]string{"Authorization": "Bearer " + key} }
func seriesOf(set *metrics.Set, lane string) int {
	return strings.Count(promText(set), `lane="`+lane+`"`)
}

func promText(set *metrics.Set) string {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	return b.String()
}

// Made-up credentials cannot grow the lanes without bound: past MaxLanes a
// new credential evicts a lane idle for 2 minutes, with its metric series,
// or is refused with 503 and never reaches the provider; known credentials
// keep their lanes, and a busy lane is never evicted.
func TestLanesAreBoundedAgainstNewCredentials(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	clock := newManualClock()
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxLanes: 2, Metrics: set, Now: clock.Now}))
	const idle = 2 * time.Minute // a lane's eviction bound, MaxPause 60s and short backoffs
	c := client(t)

	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-a")))
	clock.Advance(time.Second)
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-b")))
	require.Len(t, lanesOf(t, c, base), 2)
	sent := len(rec.seen())

	// At the limit, nothing idle long enough: a new credential is refused.
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-c")
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	var e struct{ Error struct{ Code string } }
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	assert.Equal(t, CodeTooManyLanes, e.Error.Code)
	assert.Equal(t, sent, len(rec.seen()), "a refused call reaches no provider")
	assert.Len(t, lanesOf(t, c, base), 2)

	// A known credential is never refused: its new model gets its "other"
	// lane, beyond MaxLanes.
	require.Equal(t, 200, chatModel(t, c, base, "m2", bearer("sk-a")))
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 3)
	idA := lanes[0].ID
	require.Positive(t, seriesOf(set, idA))

	// Two idle minutes later, the least recently used lane (sk-a's first,
	// used a second before the others) gives way to the new credential,
	// with its series.
	clock.Advance(idle + time.Second)
	idB := lanes[1].ID
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-c")))
	ids := map[string]bool{}
	for _, l := range lanesOf(t, c, base) {
		ids[l.ID] = true
	}
	assert.False(t, ids[idA], "the least recently used idle lane is evicted")
	assert.True(t, ids[idB])
	assert.Len(t, ids, 3)
	assert.Zero(t, seriesOf(set, idA), "an evicted lane's metric series are gone")
	assert.Contains(t, promText(set), "governor_lanes_evicted_total 1")

	// A lane with a call in flight is not evicted, however old its last
	// use: hold one of sk-c's calls at the provider and move time on.
	var wg sync.WaitGroup
	wg.Go(func() {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-c")
		req.Header.Set("X-Request-Id", "block")
		resp, err := c.Do(req)
		if assert.NoError(t, err) {
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
		}
	})
	for id := range rec.arrived {
		if id == "block" {
			break
		}
	}
	clock.Advance(idle + time.Second)
	// sk-b's lane and sk-a's "other" lane are idle: one goes for each new
	// credential.
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-d")))
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-e")))
	// Every remaining lane is busy or fresh: refused.
	assert.Equal(t, 503, chatModel(t, c, base, "m", bearer("sk-f")))
	close(rec.release)
	wg.Wait()
	ids = map[string]bool{}
	for _, l := range lanesOf(t, c, base) {
		ids[l.ID] = true
	}
	assert.Len(t, ids, 3, "sk-c's busy lane and the two new ones")
	assert.False(t, ids[idB])
}

// Made-up keys that the provider refuses (401) cannot keep a real key out
// of a lane: theirs make room at once, with no idle wait, while a key the
// provider takes keeps its lane.
func TestRefusedCredentialsMakeRoomForRealOnes(t *testing.T) {
	checkLeaks(t)
	_, mockURL := startMock(t, mockllm.Config{})
	set := newSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mockURL), MaxLanes: 2, Metrics: set}))
	c := client(t)
	require.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-real")))
	junk := bearer("sk-junk")
	junk[mockllm.HeaderFault] = "401"
	require.Equal(t, 401, chatModel(t, c, base, "m", junk))
	require.Len(t, lanesOf(t, c, base), 2)

	assert.Equal(t, 200, chatModel(t, c, base, "m", bearer("sk-real-2")), "a new key takes the refused key's lane")
	creds := map[string]bool{}
	for _, l := range lanesOf(t, c, base) {
		creds[l.Credential] = true
	}
	assert.Len(t, creds, 2)
	assert.Contains(t, promText(set), "governor_lanes_evicted_total 1")
	assert.Equal(t, 503, chatModel(t, c, base, "m", bearer("sk-real-3")), "keys the provider took keep their lanes")
}
