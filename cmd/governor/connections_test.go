package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// underNofile is a wrapper that starts governor with the given soft and
// hard limits on open files; it skips the test where this process may not
// open that many.
func underNofile(t *testing.T, soft, hard int) []string {
	t.Helper()
	requireHardNofile(t, uint64(hard))
	return []string{"sh", "-c", fmt.Sprintf(`ulimit -Sn %d && ulimit -Hn %d && exec "$0"`, soft, hard)}
}

// openFilesLimits reads a process's soft and hard limits on open files.
func openFilesLimits(t *testing.T, pid int) (soft, hard int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			soft, _ = strconv.Atoi(f[0])
			hard, _ = strconv.Atoi(f[1])
			return soft, hard
		}
	}
	t.Fatal("no open-file limit in /proc/<pid>/limits")
	return 0, 0
}

func openFiles(pid int) int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(entries)
}

// dialIdle opens n connections to addr that send nothing.
func dialIdle(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

func (g *governorProcess) alive() bool {
	select {
	case <-g.exited:
		return false
	default:
		return true
	}
}

// Running out of file descriptors does not stop Governor: with more idle
// connections to each listener than it may open files (and no connection
// cap to spare it), both listeners pause their accepts, and once the
// connections close Governor serves calls and probes again. The soft limit
// it was started with is raised to the hard one.
func TestRunningOutOfFileDescriptorsKeepsServing(t *testing.T) {
	const limit = 256
	up := newHoldUpstream(t)
	close(up.release) // answer at once
	g := startGovernorVia(t, underNofile(t, 128, limit), "GOVERNOR_UPSTREAM="+up.srv.URL,
		"GOVERNOR_MAX_CONNECTIONS=100000")
	soft, hard := openFilesLimits(t, g.cmd.Process.Pid)
	assert.Equal(t, limit, hard)
	assert.Equal(t, limit, soft, "the soft limit (128) is raised to the hard one")
	assert.Contains(t, g.logs(), "GOVERNOR_MAX_CONNECTIONS is not below the open-file limit")

	idle := append(dialIdle(t, g.base, limit+50), dialIdle(t, g.admin, 100)...)
	defer closeAll(idle)
	// Governor takes connections until its descriptors run out (it would
	// exit there), or exits.
	require.Eventually(t, func() bool { return !g.alive() || openFiles(g.cmd.Process.Pid) >= limit-2 },
		20*time.Second, 10*time.Millisecond, "governor never reached its open-file limit")
	require.True(t, g.alive(), "governor exited when it ran out of file descriptors:\n%s", g.logs())
	// The warning follows the accept that failed, which may come after
	// the count above.
	require.Eventually(t, func() bool { return strings.Contains(g.logs(), "out of file descriptors") },
		10*time.Second, 10*time.Millisecond, "no warning that descriptors ran out")

	closeAll(idle)
	// The connections that waited in the backlog are accepted and closed
	// in turn; then calls and probes are served as before.
	require.Eventually(t, func() bool { return g.readyz() == 200 }, 20*time.Second, 20*time.Millisecond)
	resp, err := oneShot.Post("http://"+g.base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, string(body))
	assert.True(t, g.alive())
	assert.NotContains(t, g.logs(), "governor stopped")
}

// keepAlive opens a connection to addr and has one request answered on
// it, so that the server holds it open; it returns the connection.
func keepAlive(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	return c
}

// refused returns what a connection beyond the cap got before it was
// closed (an answer, or nothing: EOF or reset), at once, never left waiting.
func refused(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "a connection beyond the cap is left open")
	return string(b)
}

// GOVERNOR_MAX_CONNECTIONS caps the main listener's connections: beyond
// it a new connection is answered 503 (or closed) at once, and once
// connections close new ones are served again.
func TestConnectionsBeyondTheCapAreRefused(t *testing.T) {
	const maxConns = 20
	up := newHoldUpstream(t)
	close(up.release)
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+up.srv.URL, "GOVERNOR_MAX_CONNECTIONS="+strconv.Itoa(maxConns))
	for _, l := range []struct {
		name, addr, path string
		max              int
		answer           []string // what a refused connection may get
	}{
		{"main", g.base, "/governor/lanes", maxConns, []string{"HTTP/1.1 503 Service Unavailable\r\n", "Retry-After: 1\r\n",
			`"type":"governor_error","code":"too_many_connections"`}},
	} {
		held := make([]net.Conn, 0, l.max)
		for range l.max {
			held = append(held, keepAlive(t, l.addr, l.path))
		}
		for range 5 {
			got := refused(t, l.addr)
			if got == "" {
				t.Logf("%s: a connection beyond %d: closed without an answer", l.name, l.max)
				continue
			}
			for _, want := range l.answer {
				assert.Contains(t, got, want, l.name)
			}
		}
		closeAll(held)
		require.Eventually(t, func() bool {
			c, err := net.Dial("tcp", l.addr)
			if err != nil {
				return false
			}
			defer c.Close()
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", l.path)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			return err == nil && resp.StatusCode == 200
		}, 10*time.Second, 20*time.Millisecond, "%s: served again once connections closed", l.name)
	}
	assert.True(t, g.alive())
}

// The admin listener closes a connection that sends no request within its
// read timeout: idle connections cannot pile up on it.
func TestAdminListenerClosesSilentConnections(t *testing.T) {
	g := startGovernor(t)
	c, err := net.Dial("tcp", g.admin)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(adminReadTimeout+10*time.Second)))
	_, err = io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the admin listener kept a silent connection open")
	assert.Less(t, time.Since(start), adminReadTimeout+5*time.Second)
}

// By default the main listener holds three quarters of the open-file
// limit, and at most a connection per 32 KiB of the memory limit.
func TestMaxConnectionsDefault(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		configured int
		openFiles  uint64
		memLimit   int64
		want       int
	}{
		{0, 1024, 0, 768},
		{0, 1 << 20, 0, 3 << 18},
		{0, 40, 0, 64},
		{0, 0, 0, 0},
		{500, 1024, 0, 500},
		// containerd's 1,048,576 open files in the sidecar example's
		// 512 MiB, GOMEMLIMIT 400MiB: 786,432 connections at 6 KiB
		// each would take 4.5 GiB.
		{0, 1 << 20, 400 * mib, 12800},
		{0, 1024, 400 * mib, 768},
		{0, 0, 400 * mib, 12800},
		{0, 1 << 20, 1 * mib, 64},
		{500, 1 << 20, 1 * mib, 500},
	} {
		assert.Equal(t, tc.want, maxConnections(tc.configured, tc.openFiles, tc.memLimit), "%+v", tc)
	}
	assert.Equal(t, 64, adminConnections(0))
	assert.Equal(t, 20, adminConnections(20))
	assert.Equal(t, 64, adminConnections(768))
}

// Under real traffic beyond the open-file limit, with the default
// connection cap (three quarters of it), Governor stays up and every call
// ends: the calls it took (as many as the cap) complete once the provider
// answers, the others are refused at once (503, or closed), none is left
// hanging.
func TestCallsBeyondTheOpenFileLimitAreAnsweredOrRefused(t *testing.T) {
	const (
		limit    = 256
		maxConns = limit * 3 / 4 // the default
		calls    = 300
	)
	up := newHoldUpstream(t)
	g := startGovernorVia(t, underNofile(t, limit, limit), "GOVERNOR_UPSTREAM="+up.srv.URL,
		"GOVERNOR_MAX_CONCURRENCY=8", "GOVERNOR_AIMD_INITIAL=8")
	assert.Contains(t, g.logs(), fmt.Sprintf(`"max_connections":%d`, maxConns))

	conns := make([]net.Conn, calls)
	body := `{"model":"m","messages":[{"role":"user","content":"hold"}]}`
	for i := range conns {
		c, err := net.Dial("tcp", g.base)
		require.NoError(t, err)
		defer c.Close()
		// A refused connection may be closed before the request is
		// written: the write's error does not matter, the answer does.
		_, _ = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: governor\r\nContent-Type: application/json\r\n"+
			"X-Request-Id: c-%d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", i, len(body), body)
		conns[i] = c
	}
	// Governor holds as many calls as its cap allows and has refused the
	// others (the admin listener still answers: it has connections of its
	// own). Until it has refused them all, some wait in the accept
	// backlog, and one accepted once the held calls end is served.
	require.Eventually(t, func() bool {
		m := g.scrape(t)
		return sampleValue(m, "governor_in_flight_requests") == maxConns &&
			sampleValue(m, "governor_connections_refused_total") == calls-maxConns
	}, 20*time.Second, 20*time.Millisecond, "governor never held %d calls and refused %d", maxConns, calls-maxConns)
	require.True(t, g.alive())

	close(up.release)
	var completed, refused, closed int
	for i, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "call %d left hanging", i)
		switch {
		case err != nil:
			refused++ // closed at once
			closed++
		case resp.StatusCode == 200:
			completed++
		default:
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "call %d", i)
			assert.Contains(t, string(b), `"code":"too_many_connections"`, "call %d", i)
			refused++
		}
	}
	t.Logf("%d calls completed, %d refused (%d of them closed without an answer)", completed, refused, closed)
	assert.Equal(t, maxConns, completed)
	assert.Equal(t, calls-maxConns, refused)
	assert.True(t, g.alive())
	resp, err := oneShot.Post("http://"+g.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "served as before once the calls have ended")
}

func TestParseCgroupMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0, // cgroup v2, no limit
		"9223372036854771712\n": 0, // cgroup v1, no limit
		"":                      0,
		"-1":                    0,
	} {
		n, ok := parseCgroupMemoryLimit([]byte(in))
		assert.Equal(t, want, n, "%q", in)
		assert.Equal(t, want > 0, ok, "%q", in)
	}
}

// The default connection cap is the lower of three quarters of the
// open-file limit and one connection per 32 KiB of the memory limit
// (GOMEMLIMIT), and the start-up log says what it was derived from. Each
// case sets the open-file limit itself, below any CI machine's hard limit,
// so that the machine's does not decide which bound is the lower.
func TestDefaultMaxConnectionsFollowTheLimits(t *testing.T) {
	up := newHoldUpstream(t)
	close(up.release)
	for _, tc := range []struct {
		files             int
		memLimit, logLine string
	}{
		{1024, "16MiB", `"open_files":1024,"memory_limit":16777216,"max_connections":512,`}, // 16 MiB / 32 KiB
		{256, "64MiB", `"open_files":256,"memory_limit":67108864,"max_connections":192,`},   // 256 · 3/4
	} {
		g := startGovernorVia(t, underNofile(t, tc.files, tc.files), "GOVERNOR_UPSTREAM="+up.srv.URL, "GOMEMLIMIT="+tc.memLimit)
		assert.Contains(t, g.logs(), tc.logLine, "%d open files, GOMEMLIMIT=%s", tc.files, tc.memLimit)
	}
}

// requireHardNofile skips the test unless this process may open n files:
// its hard limit, which a child can lower but not raise.
func requireHardNofile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Max < n {
		t.Skipf("the hard limit on open files is %d here; the test sets %d for Governor (ulimit -Hn %d first)", lim.Max, n, n)
	}
}

// The admin listener holds at most 64 connections, and a new one takes
// the place of the oldest that is not serving a request: connections that
// send nothing, opened by anyone who reaches the admin port, cannot keep
// the kubelet's probes out.
func TestAdminConnectionsCannotKeepProbesOut(t *testing.T) {
	g := startGovernor(t)
	held := make([]net.Conn, 0, adminMaxConnections)
	for range adminMaxConnections {
		c, err := net.Dial("tcp", g.admin)
		require.NoError(t, err)
		_, err = io.WriteString(c, "G") // a request begun, never finished
		require.NoError(t, err)
		held = append(held, c)
	}
	defer closeAll(held)
	for range 3 {
		c := keepAlive(t, g.admin, "/healthz") // 200, or it fails the test
		c.Close()
	}
	require.NoError(t, held[0].SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := held[0].Read(make([]byte, 1))
	// EOF, or a reset if the server closed it before reading its byte.
	assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"the oldest connection was closed to make room: %v", err)
}

// A connection serving a request is not closed to make room: a newcomer
// is closed instead while every connection serves one, for up to 2 s; a
// connection that serves one for longer (its client does not read its
// answer) makes room as an idle one does.
func TestAdminListenerKeepsConnectionsServing(t *testing.T) {
	entered, release := make(chan struct{}, 3), make(chan struct{})
	srv := &fasthttp.Server{
		Handler: serving(func(ctx *fasthttp.RequestCtx) {
			entered <- struct{}{}
			<-release
			ctx.SetBodyString("ok")
		}),
		ConnState: adminConnState,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var skew atomic.Int64
	al := newAdminListener(ln, 2)
	al.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	done := make(chan error, 1)
	go func() { done <- srv.Serve(al) }()
	addr := ln.Addr().String()
	busy := make([]net.Conn, 2)
	for i := range busy {
		busy[i], err = net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(busy[i], "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
		require.NoError(t, err)
	}
	defer closeAll(busy)
	<-entered
	<-entered
	assert.Empty(t, refused(t, addr), "a newcomer is closed while both connections serve requests")
	skew.Store(int64(adminBusyGrace + time.Second))
	late, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer late.Close()
	_, err = io.WriteString(late, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	require.NoError(t, err)
	<-entered // the newcomer is served, in the place of the oldest
	close(release)
	for i, c := range []net.Conn{busy[0], busy[1], late} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if i == 0 {
			assert.Error(t, err, "the connection serving a request for longer than the grace was closed")
			continue
		}
		require.NoError(t, err, "connection %d keeps its request", i)
		assert.Equal(t, 200, resp.StatusCode)
	}
	require.NoError(t, srv.Shutdown())
	require.NoError(t, <-done)
}
