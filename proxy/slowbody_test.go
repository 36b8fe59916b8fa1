package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Clients that announce large bodies and then send them slowly, or ask for
// 100 Continue and never send them, cannot keep
// the MaxBufferedBytes budget from everybody else: once a call needs room,
// a body that is behind the pace that would end it within the read timeout
// gives its room up (its client gets 408 and its connection closes), while
// a body arriving at that pace keeps its room.
func TestSlowBodiesGiveTheirRoomUp(t *testing.T) {
	checkLeaks(t)
	rec, up := newRecorder(t)
	var skew atomic.Int64 // how far the proxy's clock is ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	p, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxBufferedBytes: 1 << 20,
		ReadTimeout: time.Minute, Now: now}))
	addr := strings.TrimPrefix(base, "http://")
	body := func(n int, c byte) string {
		return `{"model":"m","x":"` + strings.Repeat(string(c), n-len(`{"model":"m","x":""}`)) + `"}`
	}
	// head announces a body of n bytes and sends its first sent bytes,
	// with the header "Expect: 100-continue" when expect is set.
	head := func(id string, n, sent int, expect bool) (net.Conn, string) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		b := body(n, 'a')
		ask := ""
		if expect {
			ask = "Expect: 100-continue\r\n"
		}
		_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n%s", id, n, ask, b[:sent])
		require.NoError(t, err)
		return c, b[sent:]
	}
	waitHeld := func(n int64) {
		require.Eventually(t, func() bool { return p.budget.held.Load() == n }, 5*time.Second, time.Millisecond, "held %d", n)
	}

	const kb = 1 << 10
	// Two clients announce 450 KiB each: one sends 10 KiB, the other asks
	// for 100 Continue and sends nothing. 900 of 1024 held.
	slow1, _ := head("slow1", 450*kb, 10*kb, false)
	waitHeld(450 * kb)
	slow2, _ := head("slow2", 450*kb, 0, true)
	waitHeld(900 * kb)

	// At once, both are on pace: a call that does not fit is refused.
	refused := startCall(t, addr, "refused", 300*kb)
	resp, answer := readResponse(t, refused)
	refused.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, answer)

	// Twenty seconds on, 10 KiB of 450 is more than 64 KiB behind the pace
	// that ends a body within the minute (150 KiB by now): the slow bodies
	// give the next call the room it needs, and their clients are told why.
	skew.Store(int64(20 * time.Second))
	call := startCall(t, addr, "served", 600*kb)
	resp, answer = readResponse(t, call)
	call.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a call is served past slow bodies: %s", answer)
	for _, c := range []net.Conn{slow1, slow2} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode == http.StatusContinue {
			resp, err = http.ReadResponse(br, nil)
		}
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s", answer)
		assert.Contains(t, string(answer), "too slowly")
		_, err = io.ReadAll(br)
		assert.NoError(t, err, "closed after the answer")
	}
	waitHeld(0)

	// A body arriving on pace keeps its room: 300 of 450 KiB sent 20 s
	// (of 60) after its head.
	steady, rest := head("steady", 450*kb, 300*kb, false)
	waitHeld(450 * kb)
	// Its pace is judged by the bytes Governor has read, not sent: wait
	// until they are (give or take a byte a read may hold back).
	require.Eventually(t, func() bool { return bodyReceived(p) >= 299*kb }, 5*time.Second, time.Millisecond,
		"the steady body's first 300 KiB read")
	skew.Add(int64(20 * time.Second))
	other, _ := head("other", 600*kb, 0, false)
	resp, answer = readResponse(t, other)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the steady body keeps its room: %s", answer)
	_, err := io.WriteString(steady, rest)
	require.NoError(t, err)
	resp, answer = readResponse(t, steady)
	assert.Equal(t, http.StatusOK, resp.StatusCode, answer)
	waitHeld(0)
	assert.Equal(t, []string{"served", "steady"}, rec.seen(), "the slow and refused calls never reached the provider")
}

// bodyReceived returns the most bytes any body holding a reservation in
// p's budget has received so far.
func bodyReceived(p *Proxy) int64 {
	b := &p.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	var most int64
	for _, r := range b.reserved {
		if r.conn != nil {
			most = max(most, r.conn.received.Load()-r.base)
		}
	}
	return most
}
