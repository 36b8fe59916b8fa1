package batchcli

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	openAILine    = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}` + "\n"
	anthropicLine = `{"custom_id":"b","method":"POST","url":"/anthropic/v1/messages","body":{}}` + "\n"
)

func TestCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, input, openAI, anthropic string
		header                         http.Header
		want                           http.Header
		warnings                       int
		err                            string
	}{
		{name: "openai", input: openAILine, openAI: "sk-o", anthropic: "sk-a",
			want: http.Header{"Authorization": {"Bearer sk-o"}}},
		{name: "anthropic", input: anthropicLine, openAI: "sk-o", anthropic: "sk-a",
			want: http.Header{"X-Api-Key": {"sk-a"}, "Anthropic-Version": {AnthropicVersion}}},
		{name: "anthropic version given", input: anthropicLine, anthropic: "sk-a",
			header: http.Header{"Anthropic-Version": {"2024-01-01"}},
			want:   http.Header{"X-Api-Key": {"sk-a"}, "Anthropic-Version": {"2024-01-01"}}},
		{name: "-H wins", input: openAILine, openAI: "sk-o",
			header: http.Header{"Authorization": {"Bearer mine"}},
			want:   http.Header{"Authorization": {"Bearer mine"}}},
		{name: "-H api-key (Azure OpenAI) wins", input: openAILine, openAI: "sk-o",
			header: http.Header{"Api-Key": {"azure"}},
			want:   http.Header{"Api-Key": {"azure"}}},
		{name: "no key", input: openAILine, want: http.Header{}, warnings: 1},
		{name: "mixed, one key", input: openAILine + anthropicLine, openAI: "sk-o",
			want: http.Header{"Authorization": {"Bearer sk-o"}}, warnings: 1},
		{name: "mixed, both keys", input: openAILine + anthropicLine, openAI: "sk-o", anthropic: "sk-a",
			err: "split it in two"},
		{name: "unparsable lines are Governor's to reject", input: "not json\n" + openAILine, openAI: "sk-o",
			want: http.Header{"Authorization": {"Bearer sk-o"}}},
	} {
		h := tc.header
		if h == nil {
			h = http.Header{}
		}
		warnings, err := Credentials(strings.NewReader(tc.input), h, tc.openAI, tc.anthropic)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, h, tc.name)
		assert.Len(t, warnings, tc.warnings, tc.name)
	}
}
