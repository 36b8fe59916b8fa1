package mockllm

import "encoding/json"

// Anthropic's messages API.

type messagesRequest struct {
	Model    string          `json:"model"`
	Messages []message       `json:"messages"`
	System   json.RawMessage `json:"system"`
	Stream   bool            `json:"stream"`
}

type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type messageStart struct {
	Type    string           `json:"type"`
	Message anthropicMessage `json:"message"`
}

type contentBlockStart struct {
	Type         string         `json:"type"`
	Index        int            `json:"index"`
	ContentBlock anthropicBlock `json:"content_block"`
}

type contentBlockDelta struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Delta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"delta"`
}

type messageDelta struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func buildMessages(body []byte, o buildOptions) (answer, *apiError) {
	var req messagesRequest
	if e := decodeObject(body, &req); e != nil {
		return answer{}, e
	}
	maxTokens, e := maxTokensOf(body)
	if e != nil {
		return answer{}, e
	}
	prompt, total := lastUserText(req.Messages)
	total += len(textOf(req.System))
	text, output := o.completion(prompt, maxTokens)
	usage := anthropicUsage{InputTokens: estimateTokens(total), OutputTokens: output}
	id := bodyID("msg_", body)
	ans := answer{idHeader: "Request-Id", id: bodyID("req_", body), model: req.Model, output: output,
		cost: tokenCost{input: usage.InputTokens, output: outputCost(maxTokens, output)}}
	endTurn := "end_turn"
	if !req.Stream {
		ans.body = mustMarshal(anthropicMessage{
			ID: id, Type: "message", Role: "assistant", Model: req.Model,
			Content:    []anthropicBlock{{Type: "text", Text: text}},
			StopReason: &endTurn, Usage: usage,
		})
		return ans, nil
	}

	start := messageStart{Type: "message_start", Message: anthropicMessage{
		ID: id, Type: "message", Role: "assistant", Model: req.Model,
		Content: []anthropicBlock{},
		Usage:   anthropicUsage{InputTokens: usage.InputTokens, OutputTokens: 1},
	}}
	events := [][]byte{
		sse("message_start", mustMarshal(start)),
		sse("content_block_start", mustMarshal(contentBlockStart{
			Type: "content_block_start", ContentBlock: anthropicBlock{Type: "text"},
		})),
		sse("ping", []byte(`{"type":"ping"}`)),
	}
	for _, piece := range splitChunks(text, o.chunks) {
		d := contentBlockDelta{Type: "content_block_delta"}
		d.Delta.Type, d.Delta.Text = "text_delta", piece
		events = append(events, sse("content_block_delta", mustMarshal(d)))
	}
	md := messageDelta{Type: "message_delta"}
	md.Delta.StopReason = endTurn
	md.Usage.OutputTokens = usage.OutputTokens
	events = append(events,
		sse("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`)),
		sse("message_delta", mustMarshal(md)),
		sse("message_stop", []byte(`{"type":"message_stop"}`)),
	)
	ans.events = events
	// Overloaded once the answer has begun, Anthropic ends the stream
	// with an error event and no message_stop.
	ans.overload = [][]byte{sse("error", statusError(statusOverloaded, false).body(shapeAnthropic))}
	ans.ping = sse("ping", []byte(`{"type": "ping"}`))
	return ans, nil
}
