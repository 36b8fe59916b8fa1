package batchcli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// AnthropicVersion is the anthropic-version header the Anthropic SDKs
// send, sent with ANTHROPIC_API_KEY unless the caller sets another.
const AnthropicVersion = "2023-06-01"

// Credentials adds to header the provider credentials the input's items
// need, as the official SDKs send them: "Authorization: Bearer
// OPENAI_API_KEY" for OpenAI-style urls, "x-api-key: ANTHROPIC_API_KEY"
// (and anthropic-version) for Anthropic's /v1/messages. The items
// inherit them. Credentials already in header (from -H: Authorization,
// x-api-key, or Azure OpenAI's api-key) win: then the keys are not used. An input that needs both keys is an error: every
// item would carry both, each to the other's provider. It returns
// warnings for keys that are needed but not set.
func Credentials(input io.Reader, header http.Header, openAIKey, anthropicKey string) (warnings []string, err error) {
	if header.Get("Authorization") != "" || header.Get("X-Api-Key") != "" || header.Get("Api-Key") != "" {
		return nil, nil
	}
	anthropic, openAI, err := providers(input)
	if err != nil {
		return nil, err
	}
	if anthropic && openAI && anthropicKey != "" && openAIKey != "" {
		return nil, fmt.Errorf("the input mixes Anthropic (/v1/messages) and OpenAI urls: every item would carry both API keys to its provider; split it in two, or give the credentials with -H")
	}
	switch {
	case anthropic && anthropicKey != "":
		header.Set("X-Api-Key", anthropicKey)
		if header.Get("Anthropic-Version") == "" {
			header.Set("Anthropic-Version", AnthropicVersion)
		}
	case anthropic:
		warnings = append(warnings, "ANTHROPIC_API_KEY is not set and no -H gives credentials: the items go to the provider without them")
	}
	switch {
	case openAI && openAIKey != "":
		header.Set("Authorization", "Bearer "+openAIKey)
	case openAI && openAIKey == "":
		warnings = append(warnings, "OPENAI_API_KEY is not set and no -H gives credentials: the items go to the provider without them")
	}
	return warnings, nil
}

// providers reports whether the JSONL input has items for Anthropic's
// Messages API and items for anything else (OpenAI-style APIs). Lines
// that do not parse are left for Governor to reject.
func providers(input io.Reader) (anthropic, openAI bool, err error) {
	sc := bufio.NewScanner(input)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var item struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &item) != nil || item.URL == "" {
			continue
		}
		path, _, _ := strings.Cut(item.URL, "?")
		if strings.HasSuffix(path, "/v1/messages") || strings.HasSuffix(path, "/v1/messages/count_tokens") {
			anthropic = true
		} else {
			openAI = true
		}
	}
	if err := sc.Err(); err != nil {
		return false, false, fmt.Errorf("read input: %w", err)
	}
	return anthropic, openAI, nil
}
