package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedUpstream answers the requests of each connection it accepts with
// answer(conn, n, br): n counts requests over all connections from 1.
// Requests are read with their Content-Length bodies.
func scriptedUpstream(t *testing.T, answer func(c net.Conn, n int, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		n     int
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for readRequest(br) == nil {
					mu.Lock()
					n++
					i := n
					mu.Unlock()
					answer(c, i, br)
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request, its Content-Length body included.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

// An upstream 204 that frames a body (RFC 9110 §8.6 and RFC 9112 §6.1:
// a 204 has none, and must send neither Content-Length nor
// Transfer-Encoding) reaches the client as a 204 without either, and its
// connection carries no other call: bytes the upstream sends after its head
// would be read as the answer to the next call on that connection.
func TestNoContentAnswerThatFramesABody(t *testing.T) {
	checkLeaks(t)
	const fake = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"fake\":true}\n"
	for name, head := range map[string]string{
		"Content-Length":    "HTTP/1.1 204 No Content\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n",
		"Transfer-Encoding": "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
				if n > 1 {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"ok\"}")
					return
				}
				io.WriteString(c, head)
				// The body the head framed comes late: after the next
				// request, if Governor sends one on this connection.
				if readRequest(br) == nil {
					io.WriteString(c, fake)
				}
			})
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
			c := client(t)
			resp, body := chat(t, c, base, nil)
			assert.Equal(t, http.StatusNoContent, resp.StatusCode, body)
			assert.Empty(t, body)
			for _, h := range []string{"Content-Length", "Transfer-Encoding", "Content-Type"} {
				assert.Empty(t, resp.Header.Values(h), "%s on a 204", h)
			}
			resp, body = chat(t, c, base, nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode, body)
			assert.Equal(t, `{"id":"ok"}`, body, "the next call gets its own answer")
			assert.Equal(t, "1", resp.Header.Get(HeaderAttempts))
		})
	}
}

// An upstream answer without a Content-Type reaches the client without
// one, not with a type Governor made up.
func TestAnswerWithoutContentTypeKeepsNone(t *testing.T) {
	checkLeaks(t)
	up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"id\":\"ok\"}")
	})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	resp, body := chat(t, client(t), base, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Empty(t, resp.Header.Values("Content-Type"))
}

// A request without a Content-Type reaches the upstream without one.
func TestRequestWithoutContentTypeKeepsNone(t *testing.T) {
	checkLeaks(t)
	types := make(chan []string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		types <- r.Header.Values("Content-Type")
		io.WriteString(w, "{}")
	}))
	defer up.Close()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL)}))
	out := rawExchange(t, strings.TrimPrefix(base, "http://"),
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"model\":\"m\"}")
	require.True(t, strings.HasPrefix(out, "HTTP/1.1 200 "), out)
	assert.Empty(t, <-types)
}

// A 304 and the answer to a HEAD request end at their heads, though they
// may announce the body a GET would get (RFC 9110 §8.6). An upstream that
// sends that body anyway, late, must not have it read as the next call's
// answer: the connection carries no other call.
func TestAnswerWithoutBodyCarriesNoOtherCall(t *testing.T) {
	checkLeaks(t)
	const fake = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"fake\":true}\n"
	for name, tc := range map[string]struct{ method, head string }{
		"304 with Content-Length": {"POST", "HTTP/1.1 304 Not Modified\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n"},
		"304 chunked":             {"POST", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"},
		"HEAD":                    {"HEAD", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(fake)) + "\r\n\r\n"},
		"HEAD chunked":            {"HEAD", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		t.Run(name, func(t *testing.T) {
			up := scriptedUpstream(t, func(c net.Conn, n int, br *bufio.Reader) {
				if n > 1 {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"id\":\"ok\"}")
					return
				}
				io.WriteString(c, tc.head)
				if readRequest(br) == nil {
					io.WriteString(c, fake)
				}
			})
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
			c := client(t)
			req, err := http.NewRequest(tc.method, base+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			resp, err := c.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Empty(t, body)
			if tc.method == "POST" {
				assert.Equal(t, http.StatusNotModified, resp.StatusCode)
			}

			resp, out := chat(t, c, base, nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode, out)
			assert.Equal(t, `{"id":"ok"}`, out, "the next call gets its own answer")
			assert.Equal(t, "1", resp.Header.Get(HeaderAttempts))
		})
	}
}
