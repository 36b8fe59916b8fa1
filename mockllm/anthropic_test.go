package mockllm_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

func TestMessagesJSON(t *testing.T) {
	_, url, c := start(t, mockllm.Config{})
	resp, body := post(t, c, url+"/v1/messages", messagesBody, "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(resp.Header.Get("Request-Id"), "req_"))

	m := decode(t, body)
	assert.True(t, strings.HasPrefix(m["id"].(string), "msg_"), "id %v", m["id"])
	assert.Equal(t, "message", m["type"])
	assert.Equal(t, "assistant", m["role"])
	assert.Equal(t, "claude-haiku-4-5", m["model"])
	assert.Equal(t, "end_turn", m["stop_reason"])
	seq, has := m["stop_sequence"]
	assert.True(t, has && seq == nil, "stop_sequence is null")
	content := m["content"].([]any)
	require.Len(t, content, 1)
	assert.Equal(t, map[string]any{"type": "text", "text": wantText}, content[0])
	usage := m["usage"].(map[string]any)
	assert.Positive(t, usage["input_tokens"])
	assert.Positive(t, usage["output_tokens"])
}

func TestMessagesStream(t *testing.T) {
	_, url, c := start(t, mockllm.Config{StreamChunks: 3})
	resp, body := post(t, c, url+"/v1/messages", messagesStreamBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	evs := parseEvents(t, body)
	var names []string
	var text strings.Builder
	for _, ev := range evs {
		names = append(names, ev.name)
		var data map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.data), &data), "event %s: %s", ev.name, ev.data)
		assert.Equal(t, ev.name, data["type"], "the data's type names its event")
		switch ev.name {
		case "message_start":
			msg := data["message"].(map[string]any)
			assert.True(t, strings.HasPrefix(msg["id"].(string), "msg_"))
			assert.Equal(t, "claude-haiku-4-5", msg["model"])
			assert.Equal(t, []any{}, msg["content"])
			assert.Nil(t, msg["stop_reason"])
		case "content_block_start":
			assert.Equal(t, map[string]any{"type": "text", "text": ""}, data["content_block"])
		case "content_block_delta":
			delta := data["delta"].(map[string]any)
			assert.Equal(t, "text_delta", delta["type"])
			text.WriteString(delta["text"].(string))
		case "message_delta":
			assert.Equal(t, "end_turn", data["delta"].(map[string]any)["stop_reason"])
			assert.Positive(t, data["usage"].(map[string]any)["output_tokens"])
		}
	}
	assert.Equal(t, []string{
		"message_start", "content_block_start", "ping",
		"content_block_delta", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop",
	}, names)
	assert.Equal(t, wantText, text.String())
}
