package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/usage"
)

// tokensOf sums governor_lane_tokens_total of kind over every lane.
func tokensOf(set *metrics.Set, kind string) int {
	re := regexp.MustCompile(`(?m)^governor_lane_tokens_total\{lane="[^"]*",kind="` + kind + `"\} (\d+)$`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(promText(set), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// Every answer's usage is counted in its lane, whatever its shape: OpenAI
// and Anthropic, whole and streamed, proxied and sent by Do. Each call is
// also made to the provider directly, to know what its usage says.
func TestTokensCounted(t *testing.T) {
	checkLeaks(t)
	_, mock := startMock(t, mockllm.Config{})
	set := metrics.NewSet()
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, mock),
		Routes: []Route{{Name: "anthropic", URL: mustURL(t, mock)}}, Metrics: set}))
	c := client(t)
	cases := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-a","messages":[{"role":"user","content":"Hello there"}]}`},
		{"/v1/chat/completions", `{"model":"gpt-a","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello"}]}`},
		{"/anthropic/v1/messages", `{"model":"claude","max_tokens":30,"messages":[{"role":"user","content":"Hi"}]}`},
		{"/anthropic/v1/messages", `{"model":"claude","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"Hi there, how are you"}]}`},
	}
	for _, tc := range cases {
		_, direct := post(t, c, mock+strings.TrimPrefix(tc.path, "/anthropic"), tc.body)
		want, ok := usage.Parse(direct)
		require.True(t, ok, "%s reports usage: %s", tc.body, direct)
		require.Positive(t, want.Prompt)
		require.Positive(t, want.Completion)

		prompt, completion := tokensOf(set, "prompt"), tokensOf(set, "completion")
		resp, _ := post(t, c, base+tc.path, tc.body)
		require.Equal(t, 200, resp.StatusCode)
		// A stream is counted when it ends, just after the client has
		// read its last byte.
		require.Eventually(t, func() bool { return tokensOf(set, "completion") > completion }, 5*time.Second, time.Millisecond, tc.body)
		assert.Equal(t, int(want.Prompt), tokensOf(set, "prompt")-prompt, tc.body)
		assert.Equal(t, int(want.Completion), tokensOf(set, "completion")-completion, tc.body)

		// The same call by Do, as a batch item makes it.
		prompt, completion = tokensOf(set, "prompt"), tokensOf(set, "completion")
		res := p.Do(context.Background(), &Call{Path: tc.path, Body: []byte(tc.body),
			Header: map[string]string{"Content-Type": "application/json"}, MaxRetries: -1})
		require.Nil(t, res.Err)
		assert.Equal(t, int(want.Prompt), tokensOf(set, "prompt")-prompt, "Do %s", tc.body)
		assert.Equal(t, int(want.Completion), tokensOf(set, "completion")-completion, "Do %s", tc.body)
	}
}

// A gzip-compressed answer (the SDKs send Accept-Encoding: gzip) is
// counted, and passed on compressed as it came.
func TestTokensCountedInGzipAnswer(t *testing.T) {
	checkLeaks(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":11,"completion_tokens":7}}`))
	require.NoError(t, zw.Close())
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz.Bytes())
	}))
	defer up.Close()
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Metrics: set}))
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader([]byte(`{"model":"m"}`)))
	require.NoError(t, err)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	assert.Equal(t, 11, tokensOf(set, "prompt"))
	assert.Equal(t, 7, tokensOf(set, "completion"))
}

// A compressed answer is decompressed to read its usage into room taken
// from the answers' budget (GOVERNOR_MAX_BUFFERED_BYTES): a gzip bomb, a
// few kilobytes that decode to 24 MiB, finds no room past the budget's
// 4 MiB, so its usage goes unread and it costs no more memory than that;
// it still reaches the client as it came. The room comes back: the next
// answer's usage is counted.
func TestCompressedAnswerIsDecompressedWithinTheBudget(t *testing.T) {
	checkLeaks(t)
	gzipped := func(body []byte) []byte {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(body)
		require.NoError(t, zw.Close())
		return gz.Bytes()
	}
	bomb := gzipped([]byte(`{"choices":[],` + strings.Repeat(" ", 24<<20) + `"usage":{"prompt_tokens":5,"completion_tokens":5}}`))
	fine := gzipped([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":11,"completion_tokens":7}}`))
	require.Less(t, len(bomb), 64<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		if r.Header.Get("X-Bomb") != "" {
			_, _ = w.Write(bomb)
			return
		}
		_, _ = w.Write(fine)
	}))
	defer up.Close()
	set := metrics.NewSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), Metrics: set, MaxBufferedBytes: 4 << 20}))
	c := client(t)
	call := func(bomb bool) []byte {
		req, err := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader([]byte(`{"model":"m"}`)))
		require.NoError(t, err)
		req.Header.Set("Accept-Encoding", "gzip")
		if bomb {
			req.Header.Set("X-Bomb", "1")
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		require.NoError(t, err)
		return body.Bytes()
	}

	var got []byte
	n := allocatedBy(func() { got = call(true) })
	assert.Equal(t, bomb, got, "passed on as it came")
	assert.Less(t, n, uint64(12<<20), "bytes allocated for an answer that decodes to 24 MiB, with a budget of 4 MiB")
	assert.Zero(t, tokensOf(set, "prompt"), "no room to read its usage")

	call(false)
	assert.Equal(t, 11, tokensOf(set, "prompt"))
	assert.Equal(t, 7, tokensOf(set, "completion"))
}
