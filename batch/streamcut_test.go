package batch_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/internal/rawupstream"
	"github.com/llmgovernor/governor/proxy"
)

// cuttingProvider answers every request on a raw socket with head+body,
// then closes the connection: an answer the provider began and broke off.
func cuttingProvider(t *testing.T, answer string) *url.URL {
	t.Helper()
	addr := rawupstream.Start(t, func(c *net.TCPConn, _ string, _ int) { _, _ = io.WriteString(c, answer) })
	u, err := url.Parse("http://" + addr)
	require.NoError(t, err)
	return u
}

// An item whose answer the provider began with 200 and cut before its end
// (a chunked stream broken off between events, a body shorter than its
// Content-Length) is FAILED with no answer to show, and its details say
// the status the provider answered with: status_code 200, as for a
// stream closed before its last event. The OpenAI Batch line still gives
// Governor's error, not a 200 response.
func TestItemWithCutAnswerKeepsItsStatus(t *testing.T) {
	const event = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"delta":{"content":"Hi"}}]}` + "\n\n"
	for _, tc := range []struct {
		name, answer string
		stream       bool
	}{
		{"chunked stream cut between events", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(event), event), true},
		{"stream shorter than its Content-Length", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\n" + event, true},
		{"JSON body shorter than its Content-Length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t) // first: the provider's goroutine ends before the check
			up := cuttingProvider(t, tc.answer)
			e := newEnv(t, envOptions{proxy: func(c *proxy.Config) { c.Upstream, c.Routes = up, nil }})
			it := chatItem("cut", "x", nil)
			it["body"].(map[string]any)["stream"] = tc.stream

			doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{it}, "max_retries": 1}))
			d := doc.Details[0]
			assert.Equal(t, proxy.StatusFailed, d.Status)
			assert.Equal(t, 2, d.Attempts)
			assert.Equal(t, 200, d.StatusCode, "the provider answered 200 before it cut the answer: %+v", d)
			assert.Nil(t, d.Response, "no whole answer to show")
			assert.JSONEq(t, "null", string(doc.Outputs[0]))

			resp, out := e.post(t, batch.PathBatch, "application/jsonl",
				`{"custom_id":"cut","method":"POST","url":"/v1/chat/completions","body":{"model":"m","stream":`+fmt.Sprint(tc.stream)+`}}`+"\n")
			require.Equal(t, 200, resp.StatusCode, out)
			var line struct {
				Response *struct{} `json:"response"`
				Error    *struct{ Code string }
			}
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line), out)
			assert.Nil(t, line.Response, out)
			require.NotNil(t, line.Error, out)
		})
	}
}
