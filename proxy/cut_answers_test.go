package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/internal/rawupstream"
)

// cuttingUpstream is a provider on a raw socket: each connection reads one
// request's head and is answered by answer, given the count of requests
// so far (1 for the first).
func cuttingUpstream(t *testing.T, answer func(c *net.TCPConn, n int)) string {
	t.Helper()
	return "http://" + rawupstream.Start(t, func(c *net.TCPConn, _ string, n int) { answer(c, n) })
}

const chunkedJSONHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"

// whole answers a complete chunked JSON body.
func whole(c *net.TCPConn) {
	io.WriteString(c, chunkedJSONHead+"d\r\n{\"id\":\"xyz1\"}\r\n0\r\n\r\n")
}

// resetAfterHead sends a chunked JSON head, then resets the connection.
func resetAfterHead(c *net.TCPConn) {
	io.WriteString(c, chunkedJSONHead)
	c.SetLinger(0)
}

// cutMidChunk sends half of a chunk, then closes the connection.
func cutMidChunk(c *net.TCPConn) {
	io.WriteString(c, chunkedJSONHead+"d\r\n{\"id\":\"x")
}

// cutBetweenChunks sends a whole chunk, then closes the connection where
// the next chunk's size should come: fasthttp's body stream reads that as
// the end of the body.
func cutBetweenChunks(c *net.TCPConn) {
	io.WriteString(c, chunkedJSONHead+"8\r\n{\"id\":\"x\r\n")
}

// A JSON answer sent chunked and cut (reset after its head, closed
// half-way through a chunk, or closed between two chunks) is never passed
// on as a complete answer: it is
// retried, and once the budget is spent it is a 502 with
// x-should-retry: false.
func TestCutChunkedAnswersAreRetriedNotPassedOn(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	for _, tc := range []struct {
		name string
		cut  func(c *net.TCPConn)
	}{
		{"reset after the head", resetAfterHead},
		{"cut half-way through a chunk", cutMidChunk},
		{"closed between two chunks", cutBetweenChunks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := cuttingUpstream(t, func(c *net.TCPConn, n int) {
				if n == 1 {
					tc.cut(c)
					return
				}
				whole(c)
			})
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
			resp, body := chat(t, client(t), base, nil)
			assert.Equal(t, 200, resp.StatusCode, body)
			assert.Equal(t, `{"id":"xyz1"}`, body, "the retried answer, whole")
			assert.Equal(t, string(StatusCompletedWithRetries), resp.Header.Get(HeaderStatus))
			assert.Equal(t, "2", resp.Header.Get(HeaderAttempts))
		})
		t.Run(tc.name+" every time", func(t *testing.T) {
			up := cuttingUpstream(t, func(c *net.TCPConn, _ int) { tc.cut(c) })
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxRetries: 2}))
			resp, body := chat(t, client(t), base, nil)
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
			assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			assert.Equal(t, string(StatusFailed), resp.Header.Get(HeaderStatus))
			assert.Equal(t, "3", resp.Header.Get(HeaderAttempts))
			code, _ := governorError(t, body)
			assert.Equal(t, CodeUpstreamUnreachable, code)
		})
	}
}

// An SSE answer still streams: its first event reaches the client before
// the provider sends the rest.
func TestEventStreamIsStillStreamed(t *testing.T) {
	checkLeaks(t)
	release := make(chan struct{})
	up := cuttingUpstream(t, func(c *net.TCPConn, _ int) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"+
			"b\r\ndata: one\n\n\r\n")
		<-release
		io.WriteString(c, "b\r\ndata: two\n\n\r\n0\r\n\r\n")
	})
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: one\n", line, "the first event arrives while the provider holds the second")
	close(release)
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: two\n\n", string(rest))
}

// Over TLS too, a chunked answer whose provider ends the session between
// two chunks (with a close_notify, or closing the socket without one) is
// retried, never passed on short; one that ends the session right after
// its last chunk is complete. TLS 1.2 and 1.3 read a close_notify
// differently (1.2 may return it with the last bytes).
func TestCutChunkedAnswerOverTLSIsRetried(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const (
		head  = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
		cut   = head + "8\r\n{\"id\":\"x\r\n"
		whole = head + "d\r\n{\"id\":\"xyz1\"}\r\n0\r\n\r\n"
	)
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		for _, tc := range []struct {
			name        string
			first       string
			closeNotify bool
			attempts    string
		}{
			{"cut, close_notify", cut, true, "2"},
			{"cut, socket closed", cut, false, "2"},
			{"whole, close_notify", whole, true, "1"},
		} {
			var n atomic.Int32
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				c, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					return
				}
				answer := whole
				if n.Add(1) == 1 {
					answer = tc.first
				}
				_, _ = buf.WriteString(answer)
				_ = buf.Flush()
				if tc.closeNotify {
					_ = c.Close()
				} else {
					_ = c.(*tls.Conn).NetConn().Close()
				}
			}))
			up.TLS = &tls.Config{MinVersion: version, MaxVersion: version}
			up.StartTLS()
			pool := x509.NewCertPool()
			pool.AddCert(up.Certificate())
			_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up.URL), TLSConfig: &tls.Config{RootCAs: pool}}))
			resp, body := chat(t, client(t), base, nil)
			name := fmt.Sprintf("%s, TLS 1.%d", tc.name, version-tls.VersionTLS10)
			assert.Equal(t, 200, resp.StatusCode, "%s: %s", name, body)
			assert.Equal(t, `{"id":"xyz1"}`, body, name)
			assert.Equal(t, tc.attempts, resp.Header.Get(HeaderAttempts), name)
			up.Close()
		}
	}
}

// An SSE stream whose connection the provider closes between two chunks,
// before the last one, is cut visibly for the client too (a read error,
// as from the provider itself), never ended as if complete; a stream
// whose last chunk came before the close ends cleanly.
func TestEventStreamClosedBetweenChunksIsCutVisibly(t *testing.T) {
	checkSockets(t)
	checkLeaks(t)
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name, answer string
		cut          bool
	}{
		{"closed between two chunks", head + "b\r\ndata: one\n\n\r\n", true},
		{"closed right after the head", head, true},
		{"closed after the last chunk", head + "b\r\ndata: one\n\n\r\n0\r\n\r\n", false},
	} {
		up := cuttingUpstream(t, func(c *net.TCPConn, _ int) { io.WriteString(c, tc.answer) })
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
		resp, err := client(t).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		require.NoError(t, err, tc.name)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, tc.name)
		if tc.cut {
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s: the client sees the cut", tc.name)
		} else {
			assert.NoError(t, err, tc.name)
		}
		if strings.Contains(tc.answer, "data: one") {
			assert.Equal(t, "data: one\n\n", string(body), "%s: what came before the cut arrives", tc.name)
		}
	}
}

// A provider's head too large (or malformed) to read is a 502 that does
// not quote the provider's header bytes: they may carry anything.
func TestUnreadableUpstreamHeadIsNotQuoted(t *testing.T) {
	checkLeaks(t)
	const canary = "provider-header-canary"
	for name, head := range map[string]string{
		"oversized": "HTTP/1.1 200 OK\r\nX-Big: " + canary + strings.Repeat("a", 2*responseHeaderBufferSize) + "\r\n",
		"malformed": "HTTP/1.1 200 OK\r\n" + canary + "\x00: x\r\n",
	} {
		up := cuttingUpstream(t, func(c *net.TCPConn, _ int) {
			io.WriteString(c, head+"Content-Length: 2\r\n\r\n{}")
		})
		_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxRetries: 1}))
		resp, body := chat(t, client(t), base, nil)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %s", name, body)
		assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"), name)
		assert.NotContains(t, body, canary, name)
		assert.NotContains(t, body, "aaaa", name)
		for k, v := range resp.Header {
			assert.NotContains(t, k+strings.Join(v, ","), canary, name)
		}
	}
}
