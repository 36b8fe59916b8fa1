package mockllm_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

func TestChatCompletionJSON(t *testing.T) {
	_, url, c := start(t, mockllm.Config{})
	resp, body := post(t, c, url+"/v1/chat/completions", chatBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	m := decode(t, body)
	assert.True(t, strings.HasPrefix(m["id"].(string), "chatcmpl-"), "id %v", m["id"])
	assert.Equal(t, "chat.completion", m["object"])
	assert.Equal(t, "gpt-4o-mini", m["model"])
	assert.IsType(t, float64(0), m["created"])
	choices := m["choices"].([]any)
	require.Len(t, choices, 1)
	choice := choices[0].(map[string]any)
	assert.Equal(t, float64(0), choice["index"])
	assert.Equal(t, "stop", choice["finish_reason"])
	msg := choice["message"].(map[string]any)
	assert.Equal(t, "assistant", msg["role"])
	assert.Equal(t, wantText, msg["content"])
	usage := m["usage"].(map[string]any)
	assert.Positive(t, usage["prompt_tokens"])
	assert.Positive(t, usage["completion_tokens"])
	assert.Equal(t, usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64), usage["total_tokens"])
}

func TestChatCompletionStream(t *testing.T) {
	_, url, c := start(t, mockllm.Config{StreamChunks: 5})
	resp, body := post(t, c, url+"/v1/chat/completions", chatStreamBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	evs := parseEvents(t, body)
	// role, 5 content chunks, finish, usage, [DONE]
	require.Len(t, evs, 9, "body: %s", body)
	assert.Equal(t, "[DONE]", evs[len(evs)-1].data)

	var text strings.Builder
	for i, ev := range evs[:len(evs)-1] {
		assert.Empty(t, ev.name, "OpenAI events have no name")
		var chunk struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Delta struct {
					Role    *string `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &chunk), "event %d: %s", i, ev.data)
		assert.Equal(t, "chat.completion.chunk", chunk.Object, "event %d", i)
		assert.Equal(t, "gpt-4o-mini", chunk.Model, "event %d", i)
		assert.True(t, strings.HasPrefix(chunk.ID, "chatcmpl-"), "event %d", i)
		switch {
		case i == 0:
			require.Len(t, chunk.Choices, 1)
			require.NotNil(t, chunk.Choices[0].Delta.Role)
			assert.Equal(t, "assistant", *chunk.Choices[0].Delta.Role)
			assert.Nil(t, chunk.Choices[0].FinishReason)
		case i <= 5:
			require.Len(t, chunk.Choices, 1)
			require.NotNil(t, chunk.Choices[0].Delta.Content, "event %d", i)
			assert.NotEmpty(t, *chunk.Choices[0].Delta.Content, "event %d", i)
			text.WriteString(*chunk.Choices[0].Delta.Content)
		case i == 6:
			require.Len(t, chunk.Choices, 1)
			require.NotNil(t, chunk.Choices[0].FinishReason)
			assert.Equal(t, "stop", *chunk.Choices[0].FinishReason)
			assert.Nil(t, chunk.Usage)
		case i == 7:
			assert.Empty(t, chunk.Choices, "usage chunk has no choices")
			require.NotNil(t, chunk.Usage)
			assert.Equal(t, chunk.Usage.PromptTokens+chunk.Usage.CompletionTokens, chunk.Usage.TotalTokens)
		}
	}
	assert.Equal(t, wantText, text.String())
}

func TestChatStreamWithoutUsage(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	w := serve(s, http.MethodPost, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`)
	require.Equal(t, http.StatusOK, w.Code)
	evs := parseEvents(t, w.Body.Bytes())
	require.Len(t, evs, 1+8+1+1, "role, 8 chunks, finish, [DONE]")
	for _, ev := range evs[:len(evs)-1] {
		assert.NotContains(t, ev.data, `"usage"`)
	}
}

func TestStreamAndJSONAgree(t *testing.T) {
	s := mockllm.New(mockllm.Config{StreamChunks: 100})
	defer s.Close()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	var full struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(serve(s, http.MethodPost, "/v1/chat/completions", body).Body.Bytes(), &full))

	streamBody := strings.Replace(body, `{"model"`, `{"stream":true,"model"`, 1)
	evs := parseEvents(t, serve(s, http.MethodPost, "/v1/chat/completions", streamBody).Body.Bytes())
	require.Len(t, evs, 1+100+1+1, "a short answer is padded to the number of chunks")
	var text strings.Builder
	for _, ev := range evs[1:101] {
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev.data), &chunk))
		text.WriteString(chunk.Choices[0].Delta.Content)
	}
	assert.Equal(t, full.Choices[0].Message.Content, text.String())
}

func TestEmbeddings(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	embed := func(body string) (int, map[string]any) {
		w := serve(s, http.MethodPost, "/v1/embeddings", body)
		return w.Code, decode(t, w.Body.Bytes())
	}
	floats := func(v any) []float32 {
		var out []float32
		for _, x := range v.([]any) {
			out = append(out, float32(x.(float64)))
		}
		return out
	}

	code, m := embed(`{"model":"text-embedding-3-small","input":"hello"}`)
	require.Equal(t, http.StatusOK, code, "%v", m)
	assert.Equal(t, "list", m["object"])
	assert.Equal(t, "text-embedding-3-small", m["model"])
	data := m["data"].([]any)
	require.Len(t, data, 1)
	item := data[0].(map[string]any)
	assert.Equal(t, "embedding", item["object"])
	assert.Equal(t, float64(0), item["index"])
	vec := floats(item["embedding"])
	assert.Len(t, vec, 8, "default dimensions")
	usage := m["usage"].(map[string]any)
	assert.Positive(t, usage["prompt_tokens"])
	assert.Equal(t, usage["prompt_tokens"], usage["total_tokens"])

	// base64, as the openai node SDK asks by default: the same little-endian
	// float32 values.
	code, m = embed(`{"model":"text-embedding-3-small","input":["hello","world"],"encoding_format":"base64","dimensions":3}`)
	require.Equal(t, http.StatusOK, code, "%v", m)
	data = m["data"].([]any)
	require.Len(t, data, 2)
	raw, err := base64.StdEncoding.DecodeString(data[0].(map[string]any)["embedding"].(string))
	require.NoError(t, err)
	require.Len(t, raw, 3*4)
	var b64 []float32
	for i := 0; i < len(raw); i += 4 {
		b64 = append(b64, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
	}
	_, m = embed(`{"model":"x","input":["hello"],"dimensions":3}`)
	assert.Equal(t, floats(m["data"].([]any)[0].(map[string]any)["embedding"]), b64, "base64 and float agree")
	assert.Equal(t, float64(1), data[1].(map[string]any)["index"])

	var norm float64
	for _, x := range b64 {
		norm += float64(x) * float64(x)
	}
	assert.InDelta(t, 1, norm, 1e-4, "unit vector")

	for _, body := range []string{
		`{"input":[1,2,3]}`,
		`{"input":[[1,2],[3]]}`,
	} {
		code, m := embed(body)
		assert.Equal(t, http.StatusOK, code, "%s: %v", body, m)
	}
	code, m = embed(`{"input":[[1,2],[3]]}`)
	require.Equal(t, http.StatusOK, code, "%v", m)
	assert.Len(t, m["data"], 2)
	assert.Equal(t, float64(3), m["usage"].(map[string]any)["prompt_tokens"])

	for _, body := range []string{
		`{"model":"x"}`,
		`{"input":[]}`,
		`{"input":42}`,
		`{"input":["a",1]}`,
		`{"input":"a","encoding_format":"hex"}`,
		`{"input":"a","dimensions":0}`,
		`{"input":"a","dimensions":100000}`,
	} {
		code, m := embed(body)
		assert.Equal(t, http.StatusBadRequest, code, body)
		assert.Equal(t, "invalid_request_error", m["error"].(map[string]any)["type"], body)
	}
}

func TestModels(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	w := serve(s, http.MethodGet, "/v1/models", "")
	require.Equal(t, http.StatusOK, w.Code)
	m := decode(t, w.Body.Bytes())
	assert.Equal(t, "list", m["object"])
	ids := map[string]bool{}
	for _, d := range m["data"].([]any) {
		ids[d.(map[string]any)["id"].(string)] = true
		assert.Equal(t, "model", d.(map[string]any)["object"])
	}
	assert.True(t, ids["gpt-4o-mini"], "%v", ids)

	w = serve(s, http.MethodGet, "/v1/models/my-model", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "my-model", decode(t, w.Body.Bytes())["id"])
}

func TestErrorShapes(t *testing.T) {
	s := mockllm.New(mockllm.Config{})
	defer s.Close()
	openAI := func(method, path, body string, wantStatus int, wantCode string, hdr ...string) {
		t.Helper()
		w := serve(s, method, path, body, hdr...)
		require.Equal(t, wantStatus, w.Code, "%s %s: %s", method, path, w.Body)
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
		m := decode(t, w.Body.Bytes())
		e, ok := m["error"].(map[string]any)
		require.True(t, ok, "%s %s: OpenAI shape: %s", method, path, w.Body)
		assert.Equal(t, "invalid_request_error", e["type"], path)
		assert.Equal(t, wantCode, e["code"], path)
		assert.NotEmpty(t, e["message"], path)
		param, has := e["param"]
		assert.True(t, has && param == nil, "%s: param is null", path)
	}
	anthropic := func(method, path, body string, wantStatus int, wantType string) {
		t.Helper()
		w := serve(s, method, path, body)
		require.Equal(t, wantStatus, w.Code, "%s %s: %s", method, path, w.Body)
		m := decode(t, w.Body.Bytes())
		assert.Equal(t, "error", m["type"], "%s: Anthropic shape: %s", path, w.Body)
		e := m["error"].(map[string]any)
		assert.Equal(t, wantType, e["type"], path)
		assert.NotEmpty(t, e["message"], path)
	}

	openAI(http.MethodPost, "/v1/nope", "{}", http.StatusNotFound, "unknown_url")
	openAI(http.MethodPost, "/", "{}", http.StatusNotFound, "unknown_url")
	openAI(http.MethodPost, "/v1/chat/completions", "{not json", http.StatusBadRequest, "invalid_json")
	openAI(http.MethodPost, "/v1/chat/completions", "", http.StatusBadRequest, "invalid_json")
	openAI(http.MethodPost, "/v1/chat/completions", "[1]", http.StatusBadRequest, "invalid_json")
	openAI(http.MethodPost, "/v1/chat/completions", `{"messages":"x"}`, http.StatusBadRequest, "invalid_json")
	openAI(http.MethodPost, "/v1/embeddings", "nope", http.StatusBadRequest, "invalid_json")
	openAI(http.MethodGet, "/v1/chat/completions", "", http.StatusMethodNotAllowed, "method_not_allowed")
	openAI(http.MethodPost, "/v1/chat/completions", chatBody, http.StatusBadRequest, "invalid_mock_header", "X-Mock-Fault", "429,bogus")
	openAI(http.MethodPost, "/v1/chat/completions", chatBody, http.StatusBadRequest, "invalid_mock_header", "X-Mock-Latency", "soon")

	anthropic(http.MethodPost, "/v1/messages", "{not json", http.StatusBadRequest, "invalid_request_error")
	anthropic(http.MethodPost, "/v1/messages/batches", "{}", http.StatusNotFound, "not_found_error")

	st := s.Stats()
	assert.Equal(t, int64(12), st.Received)
	assert.Equal(t, map[int]int64{400: 8, 404: 3, 405: 1}, st.Answered)
}

func TestDeterministicBodies(t *testing.T) {
	// Two servers with different seeds, faults off: answers depend on the
	// body only.
	a := mockllm.New(mockllm.Config{Seed: 1})
	defer a.Close()
	b := mockllm.New(mockllm.Config{Seed: 2})
	defer b.Close()
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", chatBody},
		{"/v1/chat/completions", chatStreamBody},
		{"/v1/embeddings", `{"input":["a","b"],"encoding_format":"base64"}`},
		{"/v1/messages", messagesBody},
		{"/v1/messages", messagesStreamBody},
	} {
		first := serve(a, http.MethodPost, tc.path, tc.body)
		require.Equal(t, http.StatusOK, first.Code, tc.body)
		assert.Equal(t, first.Body.String(), serve(a, http.MethodPost, tc.path, tc.body).Body.String(), "same server: %s", tc.body)
		assert.Equal(t, first.Body.String(), serve(b, http.MethodPost, tc.path, tc.body).Body.String(), "other server: %s", tc.body)
	}
	// A different body gives a different id.
	other := serve(a, http.MethodPost, "/v1/chat/completions", strings.Replace(chatBody, "Hello", "Hi", 1))
	assert.NotEqual(t, decode(t, serve(a, http.MethodPost, "/v1/chat/completions", chatBody).Body.Bytes())["id"], decode(t, other.Body.Bytes())["id"])
}
