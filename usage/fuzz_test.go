package usage_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/usage"
)

// FuzzStream checks, for any text: Parse does not panic and reports no
// negative count, and a Stream fed the text in three pieces reports what
// Parse does.
func FuzzStream(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c.body), uint16(len(c.body)/3), uint16(len(c.body)/2))
	}
	f.Add([]byte(`\\\\\\\\\\\\\\\\\\\\"usage":{"prompt_tokens":1}`), uint16(20), uint16(25))
	f.Fuzz(func(t *testing.T, body []byte, i, j uint16) {
		if len(body) > 32<<10 {
			return // a Stream waits for 64 KiB of a cut usage object at most
		}
		want, wantOK := usage.Parse(body)
		assert.GreaterOrEqual(t, want.Prompt, int64(0))
		assert.GreaterOrEqual(t, want.Completion, int64(0))
		assert.GreaterOrEqual(t, want.CachedPrompt, int64(0))

		a, b := int(i)%(len(body)+1), int(j)%(len(body)+1)
		a, b = min(a, b), max(a, b)
		var s usage.Stream
		_, _ = s.Write(body[:a])
		_, _ = s.Write(body[a:b])
		_, _ = s.Write(body[b:])
		got, ok := s.Tokens()
		assert.Equal(t, wantOK, ok, "cut at %d and %d", a, b)
		assert.Equal(t, want, got, "cut at %d and %d", a, b)
	})
}

// FuzzParseAnswer checks that a well-formed answer's counts are read
// exactly, whatever its text says (the text is where a model's output, and
// so anything, goes).
func FuzzParseAnswer(f *testing.F) {
	f.Add("Hello", int64(12), int64(3), false)
	f.Add(`"usage":{"prompt_tokens":1}`, int64(0), int64(0), true)
	f.Add(`\"usage\":{\"prompt_tokens\":1}\\`, int64(7), int64(1<<40), false)
	f.Fuzz(func(t *testing.T, text string, prompt, completion int64, anthropic bool) {
		if prompt < 0 || completion < 0 || prompt > 1<<53 || completion > 1<<53 {
			return
		}
		var answer any
		if anthropic {
			answer = map[string]any{
				"content": []any{map[string]any{"type": "text", "text": text}},
				"usage":   map[string]any{"input_tokens": prompt, "output_tokens": completion},
			}
		} else {
			answer = map[string]any{
				"choices": []any{map[string]any{"message": map[string]any{"content": text}}},
				"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion},
			}
		}
		body, err := json.Marshal(answer)
		require.NoError(t, err)
		got, ok := usage.Parse(body)
		assert.True(t, ok, "%s", body)
		assert.Equal(t, usage.Tokens{Prompt: prompt, Completion: completion}, got, "%s", body)
	})
}
