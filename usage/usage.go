package usage

// Tokens are the token counts of one answer, as its provider reported them.
type Tokens struct {
	// Prompt is the number of input tokens, cached ones included.
	Prompt int64
	// Completion is the number of output tokens.
	Completion int64
	// CachedPrompt is the part of Prompt read from the provider's prompt
	// cache (OpenAI's cached_tokens, Anthropic's cache_read_input_tokens).
	CachedPrompt int64
}

// Parse returns the usage reported in a whole answer body, and whether the
// body reports any.
func Parse(body []byte) (Tokens, bool) {
	var r report
	r.scan(body, false)
	return r.tokens()
}

// The fields a usage object may carry. Each is -1 until reported.
const (
	fPromptTokens     = iota // OpenAI prompt_tokens
	fCompletionTokens        // OpenAI completion_tokens
	fInputTokens             // Anthropic and OpenAI Responses input_tokens
	fOutputTokens            // Anthropic and OpenAI Responses output_tokens
	fCacheCreation           // Anthropic cache_creation_input_tokens
	fCacheRead               // Anthropic cache_read_input_tokens
	fCachedTokens            // OpenAI {prompt,input}_tokens_details.cached_tokens
	nFields
)

// report accumulates the usage objects of one answer: each sets the fields
// it carries.
type report struct {
	f [nFields]int64
	// set is a bit per field that some usage object has reported.
	set uint8
}

func (r *report) put(field int, v int64) {
	r.f[field] = v
	r.set |= 1 << field
}

func (r *report) get(field int) int64 {
	if r.set&(1<<field) == 0 {
		return 0
	}
	return r.f[field]
}

func (r *report) has(field int) bool { return r.set&(1<<field) != 0 }

func (r *report) tokens() (Tokens, bool) {
	var t Tokens
	switch {
	case r.has(fPromptTokens):
		t.Prompt = r.get(fPromptTokens)
	default:
		t.Prompt = sat(r.get(fInputTokens), r.get(fCacheCreation), r.get(fCacheRead))
	}
	switch {
	case r.has(fCompletionTokens):
		t.Completion = r.get(fCompletionTokens)
	default:
		t.Completion = r.get(fOutputTokens)
	}
	switch {
	case r.has(fCacheRead):
		t.CachedPrompt = r.get(fCacheRead)
	default:
		t.CachedPrompt = r.get(fCachedTokens)
	}
	return t, r.set&(1<<fPromptTokens|1<<fCompletionTokens|1<<fInputTokens|1<<fOutputTokens|1<<fCacheCreation|1<<fCacheRead) != 0
}

// sat adds non-negative counts, saturating instead of overflowing.
func sat(vs ...int64) int64 {
	var s int64
	for _, v := range vs {
		if s > maxCount-v {
			return maxCount
		}
		s += v
	}
	return s
}

// maxCount bounds a count read from an answer: larger numbers are ignored.
const maxCount = 1 << 53
