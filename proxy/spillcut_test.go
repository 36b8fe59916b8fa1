package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A JSON answer framed by the close of its connection alone, too large for
// the answers' budget and so passed on as it arrives, that the provider
// closes before the JSON's end reaches its client cut, never as a whole
// answer; the whole one arrives whole.
func TestSpilledAnswerCutAtCloseIsACut(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	whole := `{"data":"` + strings.Repeat("x", 300<<10) + `","list":[1,{"a":"}\"]"}]}`
	cut := whole[:len(whole)-3]
	up := cuttingUpstream(t, func(c *net.TCPConn, n int) {
		body := whole
		if n == 1 {
			body = cut
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"+body)
	})
	_, base := startProxy(t, Config{Upstream: mustURL(t, up), MaxBufferedBytes: 100 << 10, AttemptTimeout: 5 * time.Second, MaxRetries: -1})
	c := client(t)
	for _, tc := range []struct {
		name string
		want string
		cut  bool
	}{{"cut", cut, true}, {"whole", whole, false}} {
		resp, err := c.Post(base+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err, tc.name)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, tc.name)
		assert.True(t, tc.want == string(got), "%s: passed on as it arrived (%d bytes of %d)", tc.name, len(got), len(tc.want))
		if tc.cut {
			assert.Error(t, err, "a cut answer must not look whole to its client")
		} else {
			assert.NoError(t, err, tc.name)
		}
	}
}

// jsonEnd tells a whole JSON text from one cut short, however it is split
// across reads: brackets and quotes inside strings, escaped or not, are
// text.
func TestJSONEndTellsACut(t *testing.T) {
	whole := []string{
		`{"a":"}\"]{[","b":[1,2,{"c":"\\"}],"d":null}`,
		` [ {"x": "y\\\"z"} ] ` + "\n",
		`"a string"`,
		`{}`,
	}
	for _, w := range whole {
		for i := 0; i <= len(w); i++ {
			var j jsonEnd
			j.write([]byte(w[:i]))
			j.write([]byte(w[i:]))
			assert.True(t, j.whole(), "%q split at %d", w, i)
		}
		// Every proper prefix of an object, an array or a string is cut.
		trimmed := strings.TrimSpace(w)
		for n := range len(trimmed) {
			var j jsonEnd
			j.write([]byte(trimmed[:n]))
			assert.False(t, j.whole(), "%q cut to %q", w, trimmed[:n])
		}
	}
	for _, bad := range []string{"", "  \n", `}{`, `{"a":1}}`} {
		var j jsonEnd
		j.write([]byte(bad))
		assert.False(t, j.whole(), "%q", bad)
	}
}
