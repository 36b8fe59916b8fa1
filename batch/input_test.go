package batch_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/proxy"
)

func TestBadInputRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		proxy: func(c *proxy.Config) { c.MaxBodyBytes = 4096 },
		batch: func(c *batch.Config) { c.MaxItems = 3 },
	})
	item := `{"url":"/v1/chat/completions","body":{"model":"m"}}`
	line := func(id string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`
	}
	cases := []struct {
		name, path, contentType, body string
		status                        int
		want                          string // in the error message
	}{
		{"invalid JSON", batch.PathBatch, "application/json", `{"requests":[` + item + `,}`, 400, "invalid JSON at column"},
		{"invalid JSONL line", batch.PathBatch, "application/jsonl", line("a") + "\n{nope\n", 400, "line 2"},
		{"empty batch", batch.PathBatch, "application/json", `{"requests":[]}`, 400, "no requests"},
		{"no requests", batch.PathBatch, "application/json", `{}`, 400, "no requests"},
		{"empty JSONL", batch.PathBatch, "application/jsonl", "\n\n", 400, "no requests"},
		{"empty body", batch.PathBatch, "application/json", ``, 400, "empty body"},
		{"too many items", batch.PathBatch, "application/json", `{"requests":[` + strings.Repeat(item+",", 3) + item + `]}`, 400, "more than 3 requests"},
		{"too many lines", batch.PathBatch, "application/jsonl", line("a") + "\n" + line("b") + "\n" + line("c") + "\n" + line("d"), 400, "more than 3"},
		{"duplicate custom_id", batch.PathBatch, "application/json",
			`{"requests":[{"custom_id":"x","url":"/v1/a","body":{}},{"custom_id":"x","url":"/v1/a","body":{}}]}`, 400, `requests[1].custom_id: duplicate custom_id "x"`},
		{"duplicate custom_id in JSONL", batch.PathBatch, "application/jsonl", line("a") + "\n" + line("a"), 400, "line 2.custom_id: duplicate"},
		{"JSONL line without custom_id", batch.PathBatch, "application/jsonl", item, 400, "missing custom_id"},
		{"absolute url", batch.PathBatch, "application/json", `{"requests":[{"url":"https://evil.example/v1/x","body":{}}]}`, 400, "requests[0].url"},
		{"scheme-relative url", batch.PathBatch, "application/json", `{"requests":[{"url":"//evil.example/v1/x","body":{}}]}`, 400, "requests[0].url"},
		{"url to Governor's API", batch.PathBatch, "application/json", `{"requests":[{"url":"/governor/batch","body":{}}]}`, 400, "Governor's own API"},
		{"no url", batch.PathBatch, "application/json", `{"requests":[{"body":{}}]}`, 400, "missing url"},
		{"unsupported method", batch.PathBatch, "application/json", `{"requests":[{"method":"DELETE","url":"/v1/x","body":{}}]}`, 400, `unsupported method "DELETE"`},
		{"unknown option", batch.PathBatch, "application/json", `{"requests":[` + item + `],"paralelism":4}`, 400, `unknown option "paralelism"`},
		{"unknown query option", batch.PathBatch + "?retries=2", "application/jsonl", line("a"), 400, "option retries: unknown option"},
		{"query options on JSON", batch.PathBatch + "?priority=1", "application/json", `{"requests":[` + item + `]}`, 400, "go in its body"},
		{"unknown item field", batch.PathBatch, "application/json", `{"requests":[{"url":"/v1/x","body":{},"bdy":{}}]}`, 400, `requests[0]: invalid request: unknown field "bdy"`},
		{"body not an object", batch.PathBatch, "application/json", `{"requests":[{"url":"/v1/x","body":"hi"}]}`, 400, "requests[0].body"},
		{"header injection", batch.PathBatch, "application/json", `{"requests":[{"url":"/v1/x","body":{},"headers":{"X-A":"a\r\nX-Injected: 1"}}]}`, 400, "line break"},
		{"header Governor sets", batch.PathBatch, "application/json", `{"requests":[{"url":"/v1/x","body":{},"headers":{"Host":"evil.example"}}]}`, 400, `header "Host"`},
		{"priority out of range", batch.PathBatch, "application/json", `{"requests":[` + item + `],"priority":9}`, 400, "priority"},
		{"concurrency zero", batch.PathBatch, "application/json", `{"requests":[` + item + `],"concurrency":0}`, 400, "concurrency"},
		{"negative timeout", batch.PathBatch, "application/json", `{"requests":[` + item + `],"timeout":"-1s"}`, 400, "timeout"},
		{"max_retries too high", batch.PathBatch, "application/json", `{"requests":[` + item + `],"max_retries":1000}`, 400, "max_retries"},
		{"bad exit_on_error", batch.PathBatch + "?exit_on_error=maybe", "application/jsonl", line("a"), 400, "exit_on_error"},
		{"unsupported content type", batch.PathBatch, "text/csv", "a,b", 415, "Content-Type"},
		{"body too large", batch.PathBatch, "application/json", `{"requests":[` + item + `],"fallback":"` + strings.Repeat("x", 5000) + `"}`, 413, "larger than"},
		{"JSONL sent as JSON", batch.PathBatch, "application/json", line("a") + "\n" + line("b"), 400, `"Content-Type: application/jsonl"`},
		{"JSONL without a type", batch.PathBatches, "", line("a"), 400, `no Content-Type: send it with the header "Content-Type: application/jsonl"`},
		{"JSONL as a form", batch.PathBatch + "?max_retries=2", "application/x-www-form-urlencoded", line("a"), 400, `"Content-Type: application/jsonl"`},
		{"async: invalid", batch.PathBatches, "application/json", `{"requests":[{"url":"https://evil.example/","body":{}}]}`, 400, "requests[0].url"},
		// Values of the wrong JSON type are named in JSON's words.
		{"a JSON array of requests", batch.PathBatch, "application/json", `[` + item + `]`, 400, `want an object such as {"requests": [...]}, got array`},
		{"requests an object", batch.PathBatch, "application/json", `{"requests":{}}`, 400, "field requests: want an array, got object"},
		{"a request a number", batch.PathBatch, "application/json", `{"requests":[1]}`, 400, "requests[0]: invalid request: want an object, got number"},
		{"headers an array", batch.PathBatch, "application/json", `{"requests":[{"url":"/v1/x","body":{},"headers":[1]}]}`, 400, "field headers: want an object, got array"},
		{"concurrency a fraction", batch.PathBatch, "application/json", `{"requests":[` + item + `],"concurrency":1.5}`, 400, "field concurrency: want an integer, got number 1.5"},
		{"exit_on_error a string", batch.PathBatch, "application/json", `{"requests":[` + item + `],"exit_on_error":"yes"}`, 400, "field exit_on_error: want true or false, got string"},
		{"JSONL line an array", batch.PathBatch, "application/jsonl", `[1]`, 400, "line 1: invalid request: want an object, got array"},
	}
	for _, c := range cases {
		resp, out := e.post(t, c.path, c.contentType, c.body)
		assert.Equal(t, c.status, resp.StatusCode, "%s: %s", c.name, out)
		var msg struct {
			Error struct{ Message, Type string }
		}
		require.NoError(t, json.Unmarshal([]byte(out), &msg), "%s: %s", c.name, out)
		assert.Contains(t, msg.Error.Message, c.want, c.name)
		assert.NotRegexp(t, `batch\.|interface \{\}|\[\]`, msg.Error.Message, "%s: no Go type names", c.name)
		assert.Equal(t, "governor_error", msg.Error.Type, c.name)
	}
	assert.Zero(t, e.mock.Stats().Received, "no bad batch sent anything")
	resp, out := e.do(t, http.MethodGet, batch.PathBatches, "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"batches":[]}`, out, "no bad batch became a job")
}

// A sync batch whose client leaves stops: the items it has not started
// never run, and the item in flight is cut, its provider connection closed
// at once (the item hangs until then).
func TestClientThatLeavesCancelsItsBatch(t *testing.T) {
	t.Parallel()
	for _, accept := range []string{"application/json", "application/x-ndjson"} {
		t.Run(accept, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			const n, held = 20, 2
			items := make([]any, n)
			for i := range items {
				h := map[string]string{"X-Mock-Latency": "100ms"}
				if i == held {
					h = map[string]string{"X-Mock-Fault": "hang,hang,hang,hang"}
				}
				items[i] = chatItem("", fmt.Sprintf("q%d", i), h)
			}
			body := mustJSON(t, map[string]any{"requests": items, "concurrency": 1, "timeout": "1h"})
			conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
			require.NoError(t, err)
			_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s",
				batch.PathBatch, accept, len(body), body)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return e.mock.Stats().Hangs == 1 }, 10*time.Second, time.Millisecond,
				"item %d is in flight", held)
			require.NoError(t, conn.Close())

			didNotRun := `governor_batch_items_total{status="DID_NOT_RUN"}`
			require.Eventually(t, func() bool { return e.counter(t, didNotRun) >= n-held }, 10*time.Second, 5*time.Millisecond,
				"the batch ends soon after its client leaves")
			assert.Equal(t, held, e.counter(t, `governor_batch_items_total{status="COMPLETED"}`))
			assert.Zero(t, e.counter(t, `governor_batch_items_total{status="FAILED"}`), "the item in flight is cut: it did not run to its end")
			assert.Equal(t, n-held, e.counter(t, didNotRun), "every item has a row")
			assert.Equal(t, int64(held+1), e.mock.Stats().Received, "nothing more was sent upstream")
			require.Eventually(t, func() bool {
				ms := e.mock.Stats()
				return ms.ClientGone == 1 && ms.InFlight == 0
			}, 10*time.Second, 5*time.Millisecond, "the provider saw the item's connection close")
		})
	}
}

// A batch file saved as "UTF-8 with BOM", with Windows line ends (as
// Notepad, Excel or PowerShell write it), runs like any other.
func TestByteOrderMarkAndCRLFAreAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	line := func(id string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`
	}
	resp, out := e.post(t, batch.PathBatch, "application/jsonl", "\xef\xbb\xbf"+line("a")+"\r\n"+line("b")+"\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	for i, id := range []string{"a", "b"} {
		assert.Contains(t, lines[i], `"custom_id":"`+id+`"`)
		assert.Contains(t, lines[i], `"status_code":200`)
	}

	doc := e.runBatch(t, "\xef\xbb\xbf"+mustJSON(t, map[string]any{"requests": []any{chatItem("", "hi", nil)}}))
	assert.Equal(t, 1, doc.Summary.Completed)
}
