package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientConnPair returns a loopback client connection and its server end as
// the listener hands it out.
func clientConnPair(t *testing.T) (net.Conn, *clientConn) {
	t.Helper()
	client, server := tcpPair(t)
	return client, &clientConn{TCPConn: server.(*net.TCPConn)}
}

// The one-byte Read that waits for a request reads the rest of what has
// arrived too: the next Read is served without the socket (here, with a
// read deadline past, the socket would fail it), then reads go to the
// socket again.
func TestClientConnReadsAheadAtTheFirstByte(t *testing.T) {
	client, c := clientConnPair(t)
	const req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	_, err := io.WriteString(client, req)
	require.NoError(t, err)

	first := make([]byte, 1)
	n, err := c.Read(first)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, req[:1], string(first))

	require.NoError(t, c.TCPConn.SetReadDeadline(time.Now().Add(-time.Second)))
	rest := make([]byte, 16<<10)
	n, err = c.Read(rest)
	require.NoError(t, err, "served from what was read ahead, not the socket")
	assert.Equal(t, req[1:], string(rest[:n]))
	assert.Nil(t, c.ahead, "the buffer goes back once it is read")

	_, err = c.Read(rest)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "then reads go to the socket")
}

// A connection waiting for its next request holds no buffer: with nothing
// arrived, the read finds nothing and gives its buffer back; the one-byte
// Read then waits, and reads ahead once the request arrives.
func TestClientConnWaitsHoldingNoBuffer(t *testing.T) {
	client, c := clientConnPair(t)
	raw, err := c.TCPConn.SyscallConn()
	require.NoError(t, err)
	var done bool
	require.NoError(t, raw.Read(func(fd uintptr) bool {
		done = c.readArrived(fd)
		return true // once: not waiting
	}))
	assert.False(t, done, "nothing has arrived")
	assert.Nil(t, c.arrived, "no buffer is held while nothing has arrived")

	read := make(chan string, 1)
	go func() {
		b := make([]byte, 1)
		n, err := c.Read(b)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(b[:n])
	}()
	_, err = io.WriteString(client, "GET / HTTP/1.1\r\n\r\n")
	require.NoError(t, err)
	assert.Equal(t, "G", <-read)
	rest := make([]byte, 64)
	n, err := c.Read(rest)
	require.NoError(t, err)
	assert.Equal(t, "ET / HTTP/1.1\r\n\r\n", string(rest[:n]))
}

// A one-byte Read reports the end of the connection and a deadline as a
// socket's Read does.
func TestClientConnFirstReadErrors(t *testing.T) {
	client, c := clientConnPair(t)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err := c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())

	require.NoError(t, c.SetReadDeadline(time.Time{}))
	require.NoError(t, client.Close())
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}

// Bytes read ahead come out whole and in order however small the reads
// that take them, and before the socket's; WriteTo copies them first too.
func TestClientConnReadAheadInPieces(t *testing.T) {
	for _, name := range []string{"Read", "WriteTo"} {
		t.Run(name, func(t *testing.T) {
			client, c := clientConnPair(t)
			_, err := io.WriteString(client, "0123456789")
			require.NoError(t, err)
			b := make([]byte, 1)
			_, err = c.Read(b)
			require.NoError(t, err)
			require.NotNil(t, c.ahead, "the rest was read ahead")
			var got bytes.Buffer
			got.Write(b)
			if name == "Read" {
				p := make([]byte, 3)
				for c.ahead != nil {
					n, err := c.Read(p)
					require.NoError(t, err)
					got.Write(p[:n])
				}
			}
			_, err = io.WriteString(client, "abc")
			require.NoError(t, err)
			require.NoError(t, client.(*net.TCPConn).CloseWrite())
			_, err = io.Copy(&got, c) // WriteTo
			require.NoError(t, err)
			assert.Equal(t, "0123456789abc", got.String())
		})
	}
}

// Proxied calls on one keep-alive connection, the body of one larger than
// what is read ahead, and two requests sent back to back (pipelined), are
// each answered with what their own request said.
func TestKeepAliveRequestsAfterReadAhead(t *testing.T) {
	t.Parallel()
	checkLeaks(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"len":%d}`, len(b))
	}))
	defer up.Close()
	_, base := startProxy(t, Config{Upstream: mustURL(t, up.URL)})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()

	request := func(n int) string {
		body := `{"model":"m","pad":"` + strings.Repeat("x", n) + `"}`
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	sizes := []int{10, 3 * readAheadSize, 20, 30}
	br := bufio.NewReader(conn)
	read := func(n int) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.JSONEq(t, fmt.Sprintf(`{"len":%d}`, n+len(`{"model":"m","pad":""}`)), string(b))
	}
	for _, n := range sizes[:2] {
		_, err = io.WriteString(conn, request(n))
		require.NoError(t, err)
		read(n)
	}
	_, err = io.WriteString(conn, request(sizes[2])+request(sizes[3]))
	require.NoError(t, err)
	read(sizes[2])
	read(sizes[3])
}
