package mockllm_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

func TestStatsEndpoint(t *testing.T) {
	_, url, c := start(t, mockllm.Config{})
	post(t, c, url+"/v1/chat/completions", chatBody, "X-Request-Id", "a")
	post(t, c, url+"/v1/chat/completions", chatStreamBody, "X-Request-Id", "a")
	post(t, c, url+"/v1/chat/completions", chatBody, "X-Mock-Fault", "429")

	get := func() map[string]any {
		resp, err := c.Get(url + "/stats")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return m
	}
	m := get()
	for _, key := range []string{
		"received", "answered", "in_flight", "max_in_flight", "rate_limited",
		"streams_started", "streams_completed", "streams_aborted", "client_gone",
		"resets", "hangs", "by_request_id", "max_retry_count", "retry_count_nonzero",
		"last_headers", "limits",
	} {
		assert.Contains(t, m, key)
	}
	assert.Equal(t, float64(3), m["received"], "/stats itself is not counted")
	assert.Equal(t, map[string]any{"200": float64(2), "429": float64(1)}, m["answered"])
	assert.Equal(t, float64(1), m["rate_limited"])
	assert.Equal(t, float64(1), m["streams_started"])
	assert.Equal(t, float64(1), m["streams_completed"])
	assert.Equal(t, float64(1), m["max_in_flight"])
	assert.Equal(t, map[string]any{"a": float64(2)}, m["by_request_id"])

	for _, reset := range []*http.Request{
		newRequest(t, http.MethodPost, url+"/stats/reset", ""),
		newRequest(t, http.MethodDelete, url+"/stats", ""),
	} {
		post(t, c, url+"/v1/embeddings", `{"input":"x"}`)
		resp, err := c.Do(reset)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNoContent, resp.StatusCode, reset.Method)
		m = get()
		assert.Equal(t, float64(0), m["received"], reset.Method)
		assert.Empty(t, m["answered"], reset.Method)
		assert.Empty(t, m["by_request_id"], reset.Method)
	}

	resp, err := c.Get(url + "/stats/reset")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestHeadersSeen(t *testing.T) {
	s, url, c := start(t, mockllm.Config{})
	for _, n := range []string{"0", "2", "0", "3", "1", "junk"} {
		post(t, c, url+"/v1/chat/completions", chatBody, "X-Stainless-Retry-Count", n, "X-Custom", "v"+n)
	}
	st := s.Stats()
	assert.Equal(t, int64(3), st.MaxRetryCount)
	assert.Equal(t, int64(3), st.RetryCountNonzero)
	assert.Equal(t, "vjunk", st.LastHeaders["x-custom"])
	assert.Equal(t, "application/json", st.LastHeaders["content-type"])
	assert.Equal(t, url[len("http://"):], st.LastHeaders["host"])
	assert.NotContains(t, st.LastHeaders, "X-Custom", "names are lower case")
}
