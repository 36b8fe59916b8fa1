package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdUpstream is a provider that holds every call until release is
// closed, and counts the calls it gets by X-Request-Id.
type holdUpstream struct {
	srv     *httptest.Server
	release chan struct{}
	mu      sync.Mutex
	seen    map[string]int
}

func newHoldUpstream(t *testing.T) *holdUpstream {
	h := &holdUpstream{release: make(chan struct{}), seen: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.seen[r.Header.Get("X-Request-Id")]++
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-held","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"held"}}]}`)
	}))
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		h.srv.Close()
	})
	return h
}

// laneTotals sums in-flight and queued calls over Governor's lanes.
func laneTotals(t *testing.T, g *governorProcess) (inFlight, queued int) {
	resp, err := oneShot.Get("http://" + g.base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Lanes []struct {
			InFlight int `json:"in_flight"`
			Queued   int
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	for _, l := range out.Lanes {
		inFlight += l.InFlight
		queued += l.Queued
	}
	return inFlight, queued
}

// rssKiB reads a process's resident set size.
func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

// rawCall writes one chat completion on a connection of its own, without
// reading the answer.
func rawCall(t *testing.T, addr, id string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	body := `{"model":"m","messages":[{"role":"user","content":"hold"}]}`
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: governor\r\nContent-Type: application/json\r\n"+
		"X-Request-Id: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
	require.NoError(t, err)
	return conn
}

// readAnswer reads the answer on conn and closes it.
func readAnswer(conn net.Conn, within time.Duration) (*http.Response, string, error) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// 10,000 calls waiting in one lane are all held and all answered; at
// capacity, further calls get 503 with Retry-After at once; and the admin
// listener answers its probes while Governor is full.
func TestTenThousandWaitingCallsAreAllAnswered(t *testing.T) {
	const (
		limit    = 8
		capacity = 10_000
		overflow = 100
		calls    = limit + capacity
	)
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	if rl.Cur < calls+overflow+1000 {
		t.Skipf("needs %d open files, the limit is %d", calls+overflow+1000, rl.Cur)
	}
	up := newHoldUpstream(t)
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+up.srv.URL, "GOVERNOR_MAX_CONCURRENCY="+strconv.Itoa(limit),
		"GOVERNOR_AIMD_INITIAL="+strconv.Itoa(limit), "GOVERNOR_QUEUE_CAPACITY="+strconv.Itoa(capacity),
		"GOVERNOR_MAX_CONNECTIONS="+strconv.Itoa(calls+overflow+100))
	rssIdle := rssKiB(g.cmd.Process.Pid)

	conns := make([]net.Conn, calls)
	for i := range conns {
		conns[i] = rawCall(t, g.base, fmt.Sprintf("w-%d", i))
	}
	require.Eventually(t, func() bool {
		inFlight, queued := laneTotals(t, g)
		return inFlight == limit && queued == capacity
	}, 60*time.Second, 50*time.Millisecond, "every call is in flight or waiting")
	rssFull := rssKiB(g.cmd.Process.Pid)

	// At capacity: 503 with Retry-After, answered while every call before
	// is still held.
	for i := range overflow {
		resp, body, err := readAnswer(rawCall(t, g.base, fmt.Sprintf("over-%d", i)), 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 503, resp.StatusCode, body)
		assert.Contains(t, body, `"code":"queue_full"`)
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		assert.NoError(t, err)
		assert.True(t, ra >= 1 && ra <= 60, "Retry-After %d", ra)
	}
	rssOverflow := rssKiB(g.cmd.Process.Pid)

	// The probes answer under full load.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		start := time.Now()
		resp, err := oneShot.Get("http://" + g.admin + path)
		require.NoError(t, err, path)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode, path)
		if path == "/metrics" {
			assert.Contains(t, string(b), fmt.Sprintf("governor_in_flight_requests %d", calls))
		}
		t.Logf("%s answered in %v with %d calls held", path, time.Since(start), calls)
	}

	close(up.release)
	completed := 0
	for i, conn := range conns {
		resp, body, err := readAnswer(conn, 60*time.Second)
		if !assert.NoError(t, err, "call %d", i) {
			continue
		}
		if assert.Equal(t, 200, resp.StatusCode, "call %d: %s", i, body) && assert.Contains(t, body, `"content":"held"`, "call %d", i) {
			completed++
		}
	}
	assert.Equal(t, calls, completed, "every waiting call is answered")
	up.mu.Lock()
	assert.Len(t, up.seen, calls, "the provider saw every call")
	for id, n := range up.seen {
		if n != 1 {
			assert.Equal(t, 1, n, "the provider saw %s %d times", id, n)
		}
	}
	up.mu.Unlock()
	t.Logf("governor RSS: %d KiB idle, %d KiB with %d calls held, %d KiB after %d refused", rssIdle, rssFull, calls, rssOverflow, overflow)

	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
}
