package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A body far over the limit gets its 413, in Governor's error shape, not a
// connection reset: the client is still writing when the answer is sent, and
// closing a socket with unread bytes would reset the connection and discard
// the answer before the client reads it.
func TestBodyFarOverLimitIs413NotReset(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL), MaxBodyBytes: 1024})
	body := bytes.Repeat([]byte("x"), 8<<20)
	for i := range 5 {
		resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		require.NoError(t, err, "try %d: the 413 must reach the client", i)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, "try %d", i)
		assert.Equal(t, 413, resp.StatusCode, "try %d", i)
		var e struct {
			Error struct{ Type, Code string }
		}
		require.NoError(t, json.Unmarshal(b, &e), "try %d: %s", i, b)
		assert.Equal(t, "governor_error", e.Error.Type, "try %d", i)
	}
	assert.Zero(t, hits.Load(), "an oversized body must not reach the upstream")
}
