package batch_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

// An item of a job kept in a batch directory that was in flight when
// Governor stopped (here at the end of a drain; a kill -9 is the same) is
// sent again after the restart, and its details count every attempt the
// provider received, those before the restart included and marked, so
// that an audit of the sends finds them all.
func TestResentItemCountsItsAttemptsBeforeTheRestart(t *testing.T) {
	mock, _, opts := restartable(t)

	e1 := newEnv(t, opts)
	st := e1.createJob(t, mustJSON(t, map[string]any{
		"requests": []any{
			// A 429, then a send that hangs until the stop; the third
			// send (after the restart) is answered.
			chatItem("a", "one", map[string]string{"X-Request-Id": "a", mockllm.HeaderFault: "429,hang"}),
			chatItem("b", "two", map[string]string{"X-Request-Id": "b"}),
		},
		"max_retries": 3,
	}))
	require.Eventually(t, func() bool { return mock.Stats().Hangs == 1 && mock.Stats().ByRequestID["b"] == 1 },
		10*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, e1.batches.Shutdown(ctx), context.DeadlineExceeded)
	e1.stop()

	e2 := newEnv(t, opts)
	e2.waitJob(t, st.ID)
	resp, out := e2.do(t, http.MethodGet, batch.PathBatches+"/"+st.ID+"/results", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	var doc batch.Document
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Len(t, doc.Details, 2)

	assert.Equal(t, int64(3), mock.Stats().ByRequestID["a"], "item a was sent twice, then once more after the restart")
	a := doc.Details[0]
	assert.Equal(t, proxy.StatusCompletedWithRetries, a.Status)
	assert.Equal(t, 3, a.Attempts, "every send counts")
	assert.Equal(t, 2, a.AttemptsBeforeRestart)
	assert.Equal(t, []string{"sent before a restart: its answer was not recorded", "sent before a restart: its answer was not recorded"}, a.Errors)
	assert.Contains(t, out, `"attempts_before_restart":2`)

	b := doc.Details[1]
	assert.Equal(t, proxy.StatusCompleted, b.Status, "recorded before the stop: not sent again")
	assert.Equal(t, 1, b.Attempts)
	assert.Zero(t, b.AttemptsBeforeRestart)
	assert.Equal(t, int64(1), mock.Stats().ByRequestID["b"])
}
