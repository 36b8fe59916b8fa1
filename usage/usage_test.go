package usage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmgovernor/governor/usage"
)

// Answers as the providers send them (trimmed of fields usage ignores).
const (
	openAIJSON = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],
  "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "cached_tokens": 99}}}`

	openAIStream = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2,\"total_tokens\":14}}\n\n" +
		"data: [DONE]\n\n"

	anthropicJSON = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
  "usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":11}}`

	anthropicStream = "event: message_start\n" +
		"data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: message_delta\n" +
		"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\n" +
		"data: {\"type\":\"message_stop\"}\n\n"

	responsesStream = "event: response.output_text.delta\n" +
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\n" +
		"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi\"}]}]," +
		"\"usage\":{\"input_tokens\":36,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":87,\"total_tokens\":123}}}\n\n"
)

var cases = []struct {
	name string
	body string
	want usage.Tokens
	ok   bool
}{
	{"openai json", openAIJSON, usage.Tokens{Prompt: 19, Completion: 10, CachedPrompt: 4}, true},
	{"openai stream with include_usage", openAIStream, usage.Tokens{Prompt: 12, Completion: 2}, true},
	{"openai stream without usage", strings.ReplaceAll(openAIStream, `"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}`, `"usage":null`), usage.Tokens{}, false},
	{"anthropic json", anthropicJSON, usage.Tokens{Prompt: 35, Completion: 11, CachedPrompt: 7}, true},
	{"anthropic stream", anthropicStream, usage.Tokens{Prompt: 25, Completion: 15}, true},
	{"responses stream", responsesStream, usage.Tokens{Prompt: 36, Completion: 87}, true},
	{"usage in the model's text", `{"choices":[{"message":{"content":"say \"usage\":{\"prompt_tokens\":1000}"}}],"usage":{"prompt_tokens":5,"completion_tokens":6}}`, usage.Tokens{Prompt: 5, Completion: 6}, true},
	{"a string value usage", `{"object":"usage","n":{"prompt_tokens":9}}`, usage.Tokens{}, false},
	{"wrong types", `{"usage":{"prompt_tokens":"7","completion_tokens":true,"input_tokens":-3,"output_tokens":1.5}}`, usage.Tokens{}, false},
	{"whole floats", `{"usage":{"prompt_tokens":7.0,"completion_tokens":2e1}}`, usage.Tokens{Prompt: 7, Completion: 20}, true},
	{"too large", `{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":3}}`, usage.Tokens{Completion: 3}, true},
	{"cut short", `{"usage":{"prompt_tokens":7,"completion_tok`, usage.Tokens{}, false},
	{"not json", "<html>502 Bad Gateway</html>", usage.Tokens{}, false},
	{"empty", "", usage.Tokens{}, false},
}

func TestParse(t *testing.T) {
	for _, c := range cases {
		got, ok := usage.Parse([]byte(c.body))
		assert.Equal(t, c.ok, ok, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
}

// A stream cut into pieces anywhere reports what the whole body does: each
// case is cut at every pair of offsets.
func TestStreamCutAnywhere(t *testing.T) {
	for _, c := range cases {
		b := []byte(c.body)
		for i := 0; i <= len(b); i++ {
			for j := i; j <= len(b); j += 1 + j/16 {
				var s usage.Stream
				_, _ = s.Write(b[:i])
				_, _ = s.Write(b[i:j])
				_, _ = s.Write(b[j:])
				got, ok := s.Tokens()
				if !assert.Equal(t, c.ok, ok, "%s cut at %d and %d", c.name, i, j) ||
					!assert.Equal(t, c.want, got, "%s cut at %d and %d", c.name, i, j) {
					return
				}
			}
		}
	}
}

// A stream written a byte at a time, as a slow provider may send it.
func TestStreamByteAtATime(t *testing.T) {
	for _, c := range cases {
		var s usage.Stream
		for i := range len(c.body) {
			_, _ = s.Write([]byte{c.body[i]})
		}
		got, ok := s.Tokens()
		assert.Equal(t, c.ok, ok, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
}

// A stream keeps a few bytes, whatever it carries.
func TestStreamKeepsLittle(t *testing.T) {
	var s usage.Stream
	chunk := []byte(strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"token\"}}],\"usage\":null}\n\n", 100))
	allocs := testing.AllocsPerRun(100, func() { _, _ = s.Write(chunk) })
	assert.Zero(t, allocs)

	// A usage object cut short waits for its end, up to 64 KiB, and no more.
	s.Reset()
	_, _ = s.Write([]byte(`data: {"usage":{"prompt_tokens":1,"x":"`))
	junk := []byte(strings.Repeat("a", 1<<10))
	for range 1 << 10 {
		_, _ = s.Write(junk)
	}
	_, _ = s.Write([]byte(`"}}` + "\n\ndata: {\"usage\":{\"completion_tokens\":4}}\n\n"))
	got, ok := s.Tokens()
	assert.True(t, ok)
	assert.Equal(t, usage.Tokens{Completion: 4}, got)
}

func TestStreamReset(t *testing.T) {
	var s usage.Stream
	_, _ = s.Write([]byte(anthropicStream))
	s.Reset()
	got, ok := s.Tokens()
	assert.False(t, ok)
	assert.Zero(t, got)
}

func ExampleStream() {
	var s usage.Stream
	// What an Anthropic stream sends, as it comes.
	_, _ = s.Write([]byte(`event: message_start` + "\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_to`))
	_, _ = s.Write([]byte(`kens":1}}}` + "\n\n"))
	_, _ = s.Write([]byte(`event: message_delta` + "\n" + `data: {"type":"message_delta","usage":{"output_tokens":15}}` + "\n\n"))
	t, ok := s.Tokens()
	fmt.Println(t.Prompt, t.Completion, ok)
	// Output: 25 15 true
}

func ExampleParse() {
	t, ok := usage.Parse([]byte(`{"choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29}}`))
	fmt.Println(t.Prompt, t.Completion, ok)
	// Output: 19 10 true
}
