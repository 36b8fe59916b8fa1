package mockllm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Answers depend on the request body only, so the same body gives the same
// bytes whether it is sent directly or through a proxy.

// created is the fixed creation time in every answer (2025-01-01T00:00:00Z).
const created = 1735689600

// answerPrefix starts every simulated answer.
const answerPrefix = "Simulated answer to: "

// promptEcho is how many runes of the prompt an answer repeats.
const promptEcho = 40

// bodyID derives an id from the request body.
func bodyID(prefix string, body []byte) string {
	sum := sha256.Sum256(body)
	return prefix + hex.EncodeToString(sum[:12])
}

// filler lengthens answers that are shorter than their number of chunks.
var filler = []string{" lorem", " ipsum", " dolor", " sit", " amet"}

// answerText is the answer to prompt, at least chunks runes long so that it
// splits into that many non-empty chunks.
func answerText(prompt string, chunks int) string {
	var b strings.Builder
	b.WriteString(answerPrefix)
	n := utf8.RuneCountInString(answerPrefix)
	for i, r := range []rune(prompt) {
		if i == promptEcho {
			break
		}
		b.WriteRune(r)
		n++
	}
	for i := 0; n < chunks; i++ {
		w := filler[i%len(filler)]
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// buildOptions are the settings of the Config that shape an answer.
type buildOptions struct {
	chunks int  // content chunks of a stream
	fill   bool // Config.FillMaxTokens
}

// maxFillBytes bounds the text of an answer made as long as max_tokens.
const maxFillBytes = 256 << 10

// completion returns the answer to prompt and its output tokens: with
// o.fill and maxTokens set, exactly maxTokens (the text about four bytes a
// token, up to maxFillBytes); otherwise the short echo's estimate.
func (o buildOptions) completion(prompt string, maxTokens int) (string, int) {
	text := answerText(prompt, o.chunks)
	if !o.fill || maxTokens <= 0 {
		return text, estimateTokens(len(text))
	}
	want := min(4*maxTokens, maxFillBytes)
	var b strings.Builder
	b.Grow(want + 8)
	b.WriteString(text)
	for i := 0; b.Len() < want; i++ {
		b.WriteString(filler[i%len(filler)])
	}
	return b.String(), maxTokens
}

// splitChunks splits text into n pieces of nearly equal rune counts.
func splitChunks(text string, n int) []string {
	runes := []rune(text)
	if n > len(runes) {
		n = len(runes)
	}
	if n < 1 {
		return []string{text}
	}
	out := make([]string, n)
	for i := range n {
		out[i] = string(runes[i*len(runes)/n : (i+1)*len(runes)/n])
	}
	return out
}

// estimateTokens guesses a token count the way providers' rules of thumb do:
// about four bytes per token, at least one.
func estimateTokens(n int) int {
	return max(1, (n+3)/4)
}

// textOf returns the text of a message content: a string, or an array of
// parts or blocks whose "text" fields are joined.
func textOf(content json.RawMessage) string {
	content = trimSpaceJSON(content)
	if len(content) == 0 {
		return ""
	}
	switch content[0] {
	case '"':
		var s string
		if json.Unmarshal(content, &s) == nil {
			return s
		}
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(content, &parts) == nil {
			var texts []string
			for _, p := range parts {
				if p.Text != "" {
					texts = append(texts, p.Text)
				}
			}
			return strings.Join(texts, " ")
		}
	}
	return ""
}

func trimSpaceJSON(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// message is a chat message of either provider.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// lastUserText is the text of the last user message, and the total length
// of all message texts.
func lastUserText(msgs []message) (last string, total int) {
	for _, m := range msgs {
		t := textOf(m.Content)
		total += len(t)
		if m.Role == "user" {
			last = t
		}
	}
	return last, total
}

// splitmix64 is a small, fast mixing function: the n-th number of a
// sequence seeded by its input.
func splitmix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const golden = 0x9e3779b97f4a7c15

// seedOf derives a 64-bit seed from bytes.
func seedOf(b []byte) uint64 {
	sum := sha256.Sum256(b)
	return binary.LittleEndian.Uint64(sum[:8])
}

// answer is a prepared successful answer: a JSON body or the events of a
// stream.
type answer struct {
	body   []byte
	events [][]byte
	// overload are the events that end a stream the provider gives up
	// on, overloaded, after it has begun (see faultOverloadMidStream).
	overload [][]byte
	// ping is the keep-alive event of a stream kept open (see
	// faultPingMidStream); nil means an SSE comment line.
	ping     []byte
	idHeader string
	id       string
	model    string
	// cost is what the request costs the token budgets; output is the
	// output tokens the answer uses (at most cost.output).
	cost   tokenCost
	output int
}
