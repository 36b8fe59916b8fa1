package batch_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
	"github.com/llmgovernor/governor/proxy"
)

// A batch item's answer reaches its output as JSON whatever encoding the
// item's own headers ask for and however the provider encodes it: the
// item asks for identity, an answer gzipped or deflated all the same (as
// RFC 9110 allows when a request names no encoding) is decoded, and one
// in an encoding Governor cannot read fails the item, saying so, rather
// than completing it with the encoded bytes as its output.
func TestItemAnswersAreDecodedOrRefused(t *testing.T) {
	const answer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hello"}}]}`
	var mu sync.Mutex
	asked := map[string]string{} // the Accept-Encoding each item was sent with
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := r.Header.Get("X-Test-Encoding")
		mu.Lock()
		asked[mode] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		var b bytes.Buffer
		switch {
		case mode == "gzip-if-asked" && !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"):
			_, _ = w.Write([]byte(answer))
			return
		case mode == "gzip-if-asked", mode == "gzip":
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write([]byte(answer))
			require.NoError(t, zw.Close())
			w.Header().Set("Content-Encoding", "gzip")
		case mode == "deflate":
			zw := zlib.NewWriter(&b)
			_, _ = zw.Write([]byte(answer))
			require.NoError(t, zw.Close())
			w.Header().Set("Content-Encoding", "deflate")
		case mode == "br":
			b.Write([]byte{0x1b, 0x2a, 0x00, 0xf8, 0x8d, 0x94, 0x6e, 0xde, 0x44, 0x55, 0x86, 0x96, 0x20, 0x15})
			w.Header().Set("Content-Encoding", "br")
		case mode == "gzip-bomb": // 2 MB of JSON in about 2 KB
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write([]byte(`{"pad":"` + strings.Repeat("a", 2<<20) + `"}`))
			require.NoError(t, zw.Close())
			w.Header().Set("Content-Encoding", "gzip")
		case mode == "bad-gzip":
			b.WriteString("\x1f\x8b\x08\x00 not gzip after all")
			w.Header().Set("Content-Encoding", "gzip")
		}
		_, _ = w.Write(b.Bytes())
	}))
	t.Cleanup(up.Close)
	e := newEnv(t, envOptions{mockURL: up.URL, proxy: func(c *proxy.Config) { c.MaxRetries = 0 },
		batch: func(c *batch.Config) { c.MaxResponseBytes = 1 << 20 }})

	item := func(mode string, own map[string]string) map[string]any {
		h := map[string]string{"X-Test-Encoding": mode}
		for k, v := range own {
			h[k] = v
		}
		return chatItem(mode, "x", h)
	}
	doc := e.runBatch(t, mustJSON(t, map[string]any{"requests": []any{
		item("gzip-if-asked", map[string]string{"Accept-Encoding": "gzip, deflate, br"}),
		item("gzip", nil),
		item("deflate", nil),
		item("br", nil),
		item("bad-gzip", nil),
		item("gzip-bomb", nil),
	}}))
	require.Len(t, doc.Details, 6)
	for i, mode := range []string{"gzip-if-asked", "gzip", "deflate"} {
		assert.Equal(t, proxy.StatusCompleted, doc.Details[i].Status, mode)
		var out batch.Output
		require.NoError(t, json.Unmarshal(doc.Outputs[i], &out), mode)
		assert.JSONEq(t, answer, string(out.Body), mode)
	}
	mu.Lock()
	assert.Equal(t, "identity", asked["gzip-if-asked"], "the item's own Accept-Encoding is replaced")
	assert.Equal(t, "identity", asked["gzip"])
	mu.Unlock()
	for i, why := range map[int]string{3: `answer encoded as "br", which Governor cannot decode`, 4: "answer encoded as gzip does not decode",
		5: "answer too large: more than 1048576 bytes once decoded from gzip"} {
		d := doc.Details[i]
		assert.Equal(t, proxy.StatusFailed, d.Status, why)
		require.NotEmpty(t, d.Errors, why)
		assert.Contains(t, d.Errors[len(d.Errors)-1], why)
		assert.NotContains(t, string(doc.Outputs[i]), `\ufffd`, "no encoded bytes pass for the answer")
	}
}
