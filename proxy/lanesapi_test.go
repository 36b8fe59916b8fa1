package proxy

import (
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// /governor/lanes answers HEAD as it answers GET, without the body, as
// RFC 9110 §9.1 asks of a server that answers GET; any other method
// gets 405 with the Allow header §15.5.6 requires, naming both.
func TestLanesAnswerHEADAndSayWhatIsAllowed(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	_, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	get, err := c.Get(base + "/governor/lanes")
	require.NoError(t, err)
	body, err := io.ReadAll(get.Body)
	require.NoError(t, err)
	get.Body.Close()
	require.Equal(t, http.StatusOK, get.StatusCode)

	head, err := c.Head(base + "/governor/lanes")
	require.NoError(t, err)
	head.Body.Close()
	assert.Equal(t, http.StatusOK, head.StatusCode)
	assert.Equal(t, get.Header.Get("Content-Type"), head.Header.Get("Content-Type"))
	assert.Equal(t, strconv.Itoa(len(body)), head.Header.Get("Content-Length"))

	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(method, base+"/governor/lanes", nil)
		resp, err := c.Do(req)
		require.NoError(t, err)
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, method)
		assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"), method)
		assert.Contains(t, string(out), "method_not_allowed", method)
	}
}
