package usage_test

import (
	"strings"
	"testing"

	"github.com/llmgovernor/governor/usage"
)

// BenchmarkStream reads a streamed answer of 500 content chunks and a usage
// chunk, in pieces of 4 KiB; BenchmarkCopy is the baseline: the same bytes
// copied once, as passing them on to the client does.
func BenchmarkStream(b *testing.B) {
	body := []byte(strings.Repeat("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"}}],\"usage\":null}\n\n", 500) +
		"data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":500,\"total_tokens\":512}}\n\ndata: [DONE]\n\n")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var s usage.Stream
	for b.Loop() {
		s.Reset()
		for p := body; len(p) > 0; {
			n := min(len(p), 4096)
			_, _ = s.Write(p[:n])
			p = p[n:]
		}
		if t, _ := s.Tokens(); t.Completion != 500 {
			b.Fatal(t)
		}
	}
}

func BenchmarkCopy(b *testing.B) {
	body := make([]byte, 500*130)
	dst := make([]byte, 4096)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		for p := body; len(p) > 0; {
			n := copy(dst, p)
			p = p[n:]
		}
	}
}

func BenchmarkParse(b *testing.B) {
	body := []byte(openAIJSON)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if t, _ := usage.Parse(body); t.Prompt != 19 {
			b.Fatal(t)
		}
	}
}
