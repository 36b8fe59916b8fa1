package batch_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

// An item whose answer is larger than MaxResponseBytes fails, alone and
// clearly; the others complete.
func TestItemAnswerOverTheLimitFailsThatItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mock: mockllm.Config{FillMaxTokens: true}, batch: func(c *batch.Config) { c.MaxResponseBytes = 1500 }})
	small, large := chatItem("small", "a short question", nil), chatItem("large", "a long answer", nil)
	small["body"].(map[string]any)["max_tokens"] = 5
	large["body"].(map[string]any)["max_tokens"] = 4000
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{small, large}}))
	assert.Equal(t, proxy.StatusCompleted, doc.Details[0].Status)
	d := doc.Details[1]
	assert.Equal(t, proxy.StatusFailed, d.Status)
	assert.Equal(t, 1, d.Attempts, "not retried: the same answer would come back")
	require.NotEmpty(t, d.Errors)
	assert.Contains(t, d.Errors[len(d.Errors)-1], "more than 1500 bytes")
	assert.JSONEq(t, "null", string(doc.Outputs[1]))
}
