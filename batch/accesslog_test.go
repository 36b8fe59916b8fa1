package batch_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/internal/logtest"
	"github.com/llmgovernor/governor/mockllm"
)

// The access log has one line per batch item, the failed one and the one
// that never ran included, each with its batch, index, lane and outcome.
func TestAccessLogOneLinePerItem(t *testing.T) {
	var logs logtest.Buffer
	e := newEnv(t, envOptions{batch: func(c *batch.Config) {
		c.AccessLog = slog.New(slog.NewJSONHandler(&logs, nil))
	}})
	doc := e.runBatch(t, mustJSON(t, map[string]any{
		"requests": []any{
			chatItem("a", "hello", map[string]string{"X-Request-Id": "item-a"}),
			chatItem("b", "fails", map[string]string{mockllm.HeaderFault: "400"}),
			chatItem("c", "never runs", nil),
		},
		"exit_on_error": true,
		"concurrency":   1,
	}))
	require.Len(t, doc.Details, 3)

	lines := logs.Lines(t, "batch item")
	require.Len(t, lines, 3)
	byItem := map[float64]map[string]any{}
	for _, l := range lines {
		byItem[l["item"].(float64)] = l
		assert.NotEmpty(t, l["batch"])
		assert.Equal(t, "/v1/chat/completions", l["path"])
	}
	assert.Equal(t, "COMPLETED", byItem[0]["status"])
	assert.EqualValues(t, 200, byItem[0]["code"])
	assert.Contains(t, byItem[0]["lane"], "gpt-test")
	assert.NotEmpty(t, byItem[0]["request_id"])
	assert.Positive(t, byItem[0]["bytes_in"])
	assert.Positive(t, byItem[0]["bytes_out"])
	assert.Equal(t, "FAILED", byItem[1]["status"])
	assert.EqualValues(t, 400, byItem[1]["code"])
	assert.Equal(t, "DID_NOT_RUN", byItem[2]["status"])
	assert.EqualValues(t, 0, byItem[2]["attempts"])
}
