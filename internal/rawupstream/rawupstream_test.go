package rawupstream

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/leakcheck"
)

// Each request is answered by the test's function, after its whole head,
// with its request line and its count.
func TestAnswersEachRequestAfterItsHead(t *testing.T) {
	leakcheck.Check(t)
	lines := make(chan string, 2)
	addr := Start(t, func(c *net.TCPConn, line string, n int) {
		lines <- line
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(n)+"\r\nConnection: close\r\n\r\n"+strings.Repeat("x", n))
	})
	for n := 1; n <= 2; n++ {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/a%20b?q=1", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("X-Long", strings.Repeat("v", 5000)) // a head longer than one read
		tr := &http.Transport{}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("x", n), string(b), "request %d", n)
		assert.Equal(t, "POST /v1/a%20b?q=1 HTTP/1.1\r\n", <-lines, "request %d", n)
	}
}
