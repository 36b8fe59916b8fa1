package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// startCall writes a call with a body of n bytes on a connection of its
// own and returns the connection, its answer not read.
func startCall(t *testing.T, addr, id string, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	body := `{"model":"m","x":"` + strings.Repeat("a", n-len(`{"model":"m","x":""}`)) + `"}`
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", id, len(body), body)
	require.NoError(t, err)
	return c
}

func readResponse(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// MaxBufferedBytes bounds the request bodies held by calls waiting or in
// flight: a call whose body would not fit gets 503 buffers_full with
// Retry-After — before its body is read when Content-Length announces it —
// and nothing reaches the provider; once the calls holding bodies end,
// calls are taken again.
func TestRequestBodiesHeldAreBounded(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	set := newSet()
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 1000, Metrics: set}))
	held := func() string {
		var sb strings.Builder
		set.WritePrometheus(&sb)
		for line := range strings.SplitSeq(sb.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "governor_buffered_request_bytes "); ok {
				return v
			}
		}
		return ""
	}
	addr := strings.TrimPrefix(base, "http://")

	blocked := startCall(t, addr, "block", 600) // in flight, held by the provider
	defer blocked.Close()
	require.Equal(t, "block", <-rec.arrived)
	assert.Equal(t, "600", held())

	// Announced by Content-Length: refused on its head, the body never sent.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: announced\r\nContent-Length: 600\r\n\r\n")
	require.NoError(t, err)
	resp, body := readResponse(t, c)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	code, msg := governorError(t, body)
	assert.Equal(t, CodeBuffersFull, code)
	assert.Contains(t, msg, "would go beyond 1000 bytes", "the message names the limit, not the bytes held")

	// Chunked: read, then refused.
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c2.Close()
	chunk := `{"model":"m","x":"` + strings.Repeat("b", 580) + `"}`
	_, err = fmt.Fprintf(c2, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: chunked\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk)
	require.NoError(t, err)
	resp, body = readResponse(t, c2)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, 2.0, counterOf(t, set, `governor_errors_total{code="buffers_full"}`), "both refusals are counted")

	// A small one still fits.
	small := startCall(t, addr, "small", 300)
	resp, body = readResponse(t, small)
	small.Close()
	assert.Equal(t, 200, resp.StatusCode, body)

	close(rec.release)
	resp, body = readResponse(t, blocked)
	assert.Equal(t, 200, resp.StatusCode, body)
	assert.Equal(t, []string{"block", "small"}, rec.seen(), "the refused calls never reached the provider")

	// The budget is back: the same large call is taken now.
	again := startCall(t, addr, "again", 600)
	defer again.Close()
	resp, body = readResponse(t, again)
	assert.Equal(t, 200, resp.StatusCode, body)
	require.Eventually(t, func() bool { return held() == "0" }, 5*time.Second, time.Millisecond, "every body given back")
}

// Bodies announced by Content-Length take their room when their heads
// arrive: of two clients that send their heads at once, the one that does
// not fit is refused before it sends its body, and a client that goes
// away before sending its body gives its room back.
func TestAnnouncedBodiesAreCountedBeforeTheyAreRead(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 1000}))
	addr := strings.TrimPrefix(base, "http://")
	body := `{"model":"m","x":"` + strings.Repeat("a", 580) + `"}`
	head := func(id string) net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", id, len(body))
		require.NoError(t, err)
		return c
	}

	first := head("first")
	defer first.Close()
	require.Eventually(t, func() bool { return p.budget.held.Load() == int64(len(body)) }, 5*time.Second, time.Millisecond, "the first head reserves its body")

	second := head("second")
	defer second.Close()
	resp, answer := readResponse(t, second)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "refused on its head, its body never sent: %s", answer)

	_, err := io.WriteString(first, body)
	require.NoError(t, err)
	resp, answer = readResponse(t, first)
	assert.Equal(t, 200, resp.StatusCode, answer)
	require.Eventually(t, func() bool { return p.budget.held.Load() == 0 }, 5*time.Second, time.Millisecond, "the body is given back")

	gone := head("gone")
	require.Eventually(t, func() bool { return p.budget.held.Load() == int64(len(body)) }, 5*time.Second, time.Millisecond)
	require.NoError(t, gone.Close())
	require.Eventually(t, func() bool { return p.budget.held.Load() == 0 }, 5*time.Second, time.Millisecond, "a client gone before its body gives its room back")
	assert.Equal(t, []string{"first"}, rec.seen())
}

// A reservation that neither its handler nor serverError ended is given
// back once its deadline has passed, when room is wanted; a new request on
// the same connection replaces its predecessor's.
func TestBodyReservationsEnd(t *testing.T) {
	b := bodyBudget{max: 1000}
	var h1, h2 fasthttp.RequestHeader
	t0 := time.Unix(1000, 0)
	require.True(t, b.reserve(&h1, 600, nil, 0, t0, t0.Add(time.Minute)))
	assert.False(t, b.reserve(&h2, 600, nil, 0, t0.Add(time.Minute), t0.Add(2*time.Minute)), "h1's body may still be on its way")
	assert.True(t, b.reserve(&h2, 600, nil, 0, t0.Add(time.Minute+1), t0.Add(2*time.Minute)), "h1's deadline has passed")
	assert.EqualValues(t, 600, b.held.Load())

	assert.True(t, b.reserve(&h2, 700, nil, 0, t0, t0.Add(time.Minute)), "the next request of h2's connection replaces its reservation")
	assert.EqualValues(t, 700, b.held.Load())
	assert.EqualValues(t, 700, b.claim(&h2))
	assert.EqualValues(t, 0, b.claim(&h2), "claimed once")
	assert.True(t, b.hold(700, 700))
	assert.EqualValues(t, 700, b.held.Load(), "held by the handler now")
	b.give(700)

	require.True(t, b.reserve(&h1, 100, nil, 0, t0, t0.Add(time.Minute)))
	b.cancel(&h1)
	assert.EqualValues(t, 0, b.held.Load())
	assert.False(t, b.hold(0, 1001), "a chunked body over the budget")
	assert.True(t, b.hold(0, 1000))
	assert.EqualValues(t, 1000, b.held.Load())
}

// headerReceived reaches the connection of the request whose head it is
// given (see requestCtxOf), on keep-alive connections too.
func TestRequestCtxOfHeader(t *testing.T) {
	checkLeaks(t)
	type seen struct{ hook, handler net.Conn }
	got := make(chan seen, 4)
	var hook net.Conn
	srv := &fasthttp.Server{
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			hook = requestCtxOf(h).Conn()
			return fasthttp.RequestConfig{}
		},
		Handler:           func(ctx *fasthttp.RequestCtx) { got <- seen{hook, ctx.Conn()} },
		ReduceMemoryUsage: true,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	for range 2 {
		_, err = io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		require.NoError(t, err)
		s := <-got
		require.NotNil(t, s.handler)
		assert.Same(t, s.handler, s.hook)
		_, _ = readResponse(t, c)
	}
	require.NoError(t, c.Close())
	require.NoError(t, srv.Shutdown())
	require.NoError(t, <-done)
}

// headLen counts the bytes of a head as sent.
func TestHeadLen(t *testing.T) {
	for _, head := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n",
		"POST /a?b=c%20d HTTP/1.0\r\nHost:x\r\nX-Long:  " + strings.Repeat("v", 300) + "\r\nContent-Length: 2\r\n\r\n",
	} {
		var h fasthttp.RequestHeader
		require.NoError(t, h.Read(bufio.NewReader(strings.NewReader(head+"hi"))))
		assert.EqualValues(t, len(head), headLen(&h), head)
	}
}

// Chunked bodies take room while they are read: MaxBodyBytes, or what
// the budget has left, which then bounds the body (503 buffers_full
// beyond it, 413 beyond MaxBodyBytes); the handler gives back what the
// body did not use.
func TestChunkedBodiesAreCountedWhileTheyAreRead(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	const kb = 1 << 10
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 1000 * kb, MaxBodyBytes: 400 * kb}))
	addr := strings.TrimPrefix(base, "http://")
	// chunked starts a chunked call and sends n bytes of its body.
	chunked := func(id string, n int) net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		body := `{"model":"m","x":"` + strings.Repeat("a", n-len(`{"model":"m","x":"`)) // the rest never comes
		_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n", id, len(body), body)
		require.NoError(t, err)
		return c
	}
	held := func(n int64) {
		require.Eventually(t, func() bool { return p.budget.held.Load() == n }, 5*time.Second, time.Millisecond, "held %d", n)
	}

	a := chunked("a", 300*kb)
	held(400 * kb)
	chunked("b", 300*kb)
	held(800 * kb)
	// 200 KiB left: enough for a chunked body of 100 KiB, not of 300.
	c := chunked("c", 300*kb)
	resp, answer := readResponse(t, c)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, answer)
	code, _ := governorError(t, answer)
	assert.Equal(t, CodeBuffersFull, code)
	held(800 * kb)
	resp, answer = readResponse(t, startCall(t, addr, "d", 300*kb))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "announced, and does not fit: %s", answer)

	_, err := io.WriteString(a, "2\r\n\"}\r\n0\r\n\r\n")
	require.NoError(t, err)
	resp, answer = readResponse(t, a)
	assert.Equal(t, http.StatusOK, resp.StatusCode, answer)
	held(400 * kb)

	over := chunked("over", 300*kb)
	_, err = fmt.Fprintf(over, "%x\r\n%s\r\n", 200*kb, strings.Repeat("a", 200*kb))
	require.NoError(t, err)
	resp, answer = readResponse(t, over)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "beyond MaxBodyBytes: %s", answer)
	held(400 * kb)
	assert.Equal(t, []string{"a"}, rec.seen())
}

// A body refused room at its head gets 503 buffers_full however long its
// bytes take to come, even when other calls ask for room meanwhile: its
// refusal is not taken for a reservation past its deadline.
func TestRefusedBodyStaysRefusedWhileOthersAskForRoom(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	const kb = 1 << 10
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 800 * kb, MaxBodyBytes: 400 * kb}))
	addr := strings.TrimPrefix(base, "http://")
	held := func(n int64) {
		require.Eventually(t, func() bool { return p.budget.held.Load() == n }, 5*time.Second, time.Millisecond, "held %d", n)
	}
	// Two bodies announced and not sent fill the budget.
	for _, id := range []string{"a", "b"} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n\r\n", id, 400*kb)
		require.NoError(t, err)
	}
	held(800 * kb)
	// A chunked call whose head finds no room; its body comes later.
	late, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { late.Close() })
	_, err = io.WriteString(late, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: late\r\nTransfer-Encoding: chunked\r\n\r\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.budget.mu.Lock()
		defer p.budget.mu.Unlock()
		return len(p.budget.reserved) == 3
	}, 5*time.Second, time.Millisecond, "the chunked call's head was refused")
	// Another call asks for room meanwhile, and is refused.
	resp, answer := readResponse(t, startCall(t, addr, "other", 300*kb))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, answer)
	// The chunked body comes.
	body := `{"model":"m"}`
	_, err = fmt.Fprintf(late, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	require.NoError(t, err)
	resp, answer = readResponse(t, late)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, answer)
	code, _ := governorError(t, answer)
	assert.Equal(t, CodeBuffersFull, code)
	held(800 * kb)
	assert.Empty(t, rec.seen())
}
