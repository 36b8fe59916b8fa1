package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// A call's own attempt timeout (a batch's "timeout") shorter than the time
// the lane's calls take to be answered says nothing of the provider: the
// attempt times out, is counted and retried as a timeout, but the lane's
// limit is not cut for it, so one caller's impatience does not throttle
// every other caller of the lane. A timeout longer than the lane's usual
// answer (a provider that hangs) still cuts it.
func TestTimeoutShorterThanTheLanesAnswersCutsNothing(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, url := startMock(t, mockllm.Config{Latency: 60 * time.Millisecond})
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, url)}))
	c := client(t)
	call := func(timeout time.Duration, header map[string]string) Result {
		return p.Do(context.Background(), &Call{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-test"}`),
			MaxRetries: 1, AttemptTimeout: timeout, Header: header})
	}
	for i := range 5 { // the lane learns how long its answers take
		require.Nil(t, call(0, nil).Err, "call %d", i)
	}
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, 1)
	require.Greater(t, lanes[0].LatencyEWMAMs, 30.0)
	limit := lanes[0].Limit

	for i := range 6 {
		res := call(15*time.Millisecond, nil)
		require.NotNil(t, res.Err, "call %d", i)
		assert.Equal(t, []string{"timeout after 15ms", "timeout after 15ms"}, res.Details.Errors)
	}
	lanes = lanesOf(t, c, base)
	assert.Zero(t, lanes[0].Decreases, "a caller's short timeouts cut nothing")
	assert.Zero(t, lanes[0].Collapses)
	assert.Equal(t, limit, lanes[0].Limit)
	assert.Equal(t, uint64(12), lanes[0].Failures["timeout"], "they are timeouts all the same")

	// The provider hangs past a timeout longer than its usual answer: a
	// congestion signal, as before.
	res := call(300*time.Millisecond, map[string]string{mockllm.HeaderLatency: "2s"})
	require.NotNil(t, res.Err)
	lanes = lanesOf(t, c, base)
	assert.Positive(t, lanes[0].Decreases+lanes[0].Collapses, fmt.Sprintf("%+v", lanes[0]))
}
