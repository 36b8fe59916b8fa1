package mockllm

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// OpenAI's chat completions, embeddings and models.

type chatRequest struct {
	Model         string    `json:"model"`
	Messages      []message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             openAIUsage  `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type openAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

const fingerprint = "fp_mockllm"

// sseDone ends an OpenAI stream.
const sseDone = "data: [DONE]\n\n"

// midStreamError is the event OpenAI sends in place of the next chunk when
// it fails once a stream has begun: an unnamed event holding only an error
// object, no choices, after which the stream ends with [DONE]. The SDKs
// raise it as an APIError. Overload and internal errors alike come as a
// server_error.
var midStreamError = mustMarshal(openAIErrorBody{Error: openAIErrorDetail{
	Message: "The server is overloaded or not ready yet. (simulated by mockllm)",
	Type:    "server_error",
}})

// decodeObject decodes a JSON object body into v.
func decodeObject(body []byte, v any) *apiError {
	b := trimSpaceJSON(body)
	if len(b) == 0 || b[0] != '{' {
		e := errInvalid("invalid_json", "We could not parse the JSON body of your request: want a JSON object.")
		return &e
	}
	if err := json.Unmarshal(b, v); err != nil {
		e := errInvalid("invalid_json", "We could not parse the JSON body of your request: "+err.Error())
		return &e
	}
	return nil
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our answer types always marshal
	}
	return b
}

// sse frames data as a server-sent event, named when event is not empty.
func sse(event string, data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(event) + len(data) + 16)
	if event != "" {
		b.WriteString("event: ")
		b.WriteString(event)
		b.WriteByte('\n')
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}

func buildChat(body []byte, o buildOptions) (answer, *apiError) {
	var req chatRequest
	if e := decodeObject(body, &req); e != nil {
		return answer{}, e
	}
	maxTokens, e := maxTokensOf(body)
	if e != nil {
		return answer{}, e
	}
	prompt, total := lastUserText(req.Messages)
	text, output := o.completion(prompt, maxTokens)
	usage := openAIUsage{PromptTokens: estimateTokens(total), CompletionTokens: output}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	id := bodyID("chatcmpl-", body)
	ans := answer{idHeader: "X-Request-Id", id: bodyID("req_", body), model: req.Model, output: output,
		cost: tokenCost{input: usage.PromptTokens, output: outputCost(maxTokens, output)}}
	if !req.Stream {
		ans.body = mustMarshal(chatCompletion{
			ID: id, Object: "chat.completion", Created: created, Model: req.Model,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text}, FinishReason: "stop"}},
			Usage:   usage, SystemFingerprint: fingerprint,
		})
		return ans, nil
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chunk := func(delta chunkDelta, finish *string) []byte {
		c := chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: fingerprint, Choices: []chunkChoice{{Delta: delta, FinishReason: finish}},
		}
		if includeUsage {
			c.Usage = json.RawMessage("null")
		}
		return sse("", mustMarshal(c))
	}
	empty, stop := "", "stop"
	events := [][]byte{chunk(chunkDelta{Role: "assistant", Content: &empty}, nil)}
	for _, piece := range splitChunks(text, o.chunks) {
		events = append(events, chunk(chunkDelta{Content: &piece}, nil))
	}
	events = append(events, chunk(chunkDelta{}, &stop))
	if includeUsage {
		events = append(events, sse("", mustMarshal(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: fingerprint, Choices: []chunkChoice{}, Usage: mustMarshal(usage),
		})))
	}
	events = append(events, []byte(sseDone))
	ans.events = events
	ans.overload = [][]byte{sse("", midStreamError), []byte(sseDone)}
	return ans, nil
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingList struct {
	Object string         `json:"object"`
	Data   []embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  embeddingUsage `json:"usage"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

const (
	defaultDimensions = 8
	maxDimensions     = 4096
)

func buildEmbeddings(body []byte, _ buildOptions) (answer, *apiError) {
	var req embeddingRequest
	if e := decodeObject(body, &req); e != nil {
		return answer{}, e
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		e := errInvalid("invalid_value", fmt.Sprintf("Invalid value for 'encoding_format': %q (want float or base64).", req.EncodingFormat))
		return answer{}, &e
	}
	dims := defaultDimensions
	if req.Dimensions != nil {
		dims = *req.Dimensions
		if dims < 1 || dims > maxDimensions {
			e := errInvalid("invalid_value", fmt.Sprintf("Invalid value for 'dimensions': %d (want 1 to %d).", dims, maxDimensions))
			return answer{}, &e
		}
	}
	items, tokens, err := embeddingInputs(req.Input)
	if err != nil {
		e := errInvalid("invalid_value", "Invalid 'input': "+err.Error())
		return answer{}, &e
	}
	list := embeddingList{
		Object: "list", Model: req.Model,
		Data:  make([]embedding, len(items)),
		Usage: embeddingUsage{PromptTokens: tokens, TotalTokens: tokens},
	}
	for i, item := range items {
		vec := vectorOf(item, dims)
		var v any = vec
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			v = base64.StdEncoding.EncodeToString(buf)
		}
		list.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v}
	}
	return answer{body: mustMarshal(list), idHeader: "X-Request-Id", id: bodyID("req_", body),
		model: req.Model, cost: tokenCost{input: tokens}}, nil
}

// embeddingInputs splits an embeddings input into items: a string, an array
// of strings, an array of tokens, or an array of token arrays. It returns
// each item's JSON and the token count.
func embeddingInputs(raw json.RawMessage) (items []json.RawMessage, tokens int, err error) {
	raw = trimSpaceJSON(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, 0, fmt.Errorf("'input' is a required property")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, 0, err
		}
		return []json.RawMessage{raw}, estimateTokens(len(s)), nil
	case '[':
	default:
		return nil, 0, fmt.Errorf("want a string or an array")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, 0, err
	}
	if len(elems) == 0 {
		return nil, 0, fmt.Errorf("empty array")
	}
	first := trimSpaceJSON(elems[0])
	if len(first) > 0 && (first[0] == '-' || first[0] >= '0' && first[0] <= '9') {
		var toks []int64
		if err := json.Unmarshal(raw, &toks); err != nil {
			return nil, 0, fmt.Errorf("want an array of token integers: %w", err)
		}
		return []json.RawMessage{raw}, len(toks), nil
	}
	for i, el := range elems {
		el = trimSpaceJSON(el)
		switch {
		case len(el) > 0 && el[0] == '"':
			var s string
			if err := json.Unmarshal(el, &s); err != nil {
				return nil, 0, fmt.Errorf("item %d: %w", i, err)
			}
			tokens += estimateTokens(len(s))
		case len(el) > 0 && el[0] == '[':
			var toks []int64
			if err := json.Unmarshal(el, &toks); err != nil {
				return nil, 0, fmt.Errorf("item %d: want an array of token integers: %w", i, err)
			}
			if len(toks) == 0 {
				return nil, 0, fmt.Errorf("item %d: empty token array", i)
			}
			tokens += len(toks)
		default:
			return nil, 0, fmt.Errorf("item %d: want a string or a token array", i)
		}
	}
	return elems, tokens, nil
}

// vectorOf is a deterministic unit vector of dims dimensions for item.
func vectorOf(item []byte, dims int) []float32 {
	seed := seedOf(item)
	vec := make([]float32, dims)
	var norm float64
	for i := range vec {
		v := float64(splitmix64(seed+uint64(i+1)*golden)>>40)/(1<<24)*2 - 1
		vec[i] = float32(v)
		norm += v * v
	}
	if norm > 0 {
		norm = math.Sqrt(norm)
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / norm)
		}
	}
	return vec
}

// Models listed by GET /v1/models.
var modelIDs = []string{
	"gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "text-embedding-3-small",
	"claude-sonnet-4-5", "claude-haiku-4-5",
}

type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string  `json:"object"`
	Data   []model `json:"data"`
}

var modelListBody = func() []byte {
	l := modelList{Object: "list"}
	for _, id := range modelIDs {
		l.Data = append(l.Data, model{ID: id, Object: "model", Created: created, OwnedBy: "mockllm"})
	}
	return mustMarshal(l)
}()

func buildModels([]byte, buildOptions) (answer, *apiError) {
	return answer{body: modelListBody}, nil
}

// buildModel describes any model id: the simulation serves every model.
func buildModel(id string) (answer, *apiError) {
	return answer{body: mustMarshal(model{ID: id, Object: "model", Created: created, OwnedBy: "mockllm"})}, nil
}
