package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// buildGovernor builds the governor binary once per test binary run.
var buildGovernor = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "governor-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "governor")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// governorProcess is a real governor process for a test.
type governorProcess struct {
	cmd         *exec.Cmd
	base, admin string
	stdout      *lockedWriter
	stderr      *bytes.Buffer
	exited      chan struct{}
}

// startMock starts a simulated provider for the test, stopped when the
// test ends, and returns it and its base URL.
func startMock(t *testing.T, cfg mockllm.Config) (*mockllm.Server, string) {
	t.Helper()
	s, base, stop, err := mockllm.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(stop)
	return s, base
}

func startGovernor(t *testing.T, env ...string) *governorProcess {
	t.Helper()
	return startGovernorVia(t, nil, env...)
}

// startGovernorVia starts governor as the last argument of the command
// wrapper (such as a shell that sets limits first; nil: directly) and
// waits until it is ready.
//
// Governor binds ports of its own choosing (127.0.0.1:0) and the test
// learns them from its start-up line, "governor started", written at
// GOVERNOR_LOG_LEVEL=info: ports picked free here and released could be
// taken by another process before governor binds them, and the test would
// then talk to that one.
func startGovernorVia(t *testing.T, wrapper []string, env ...string) *governorProcess {
	t.Helper()
	bin, err := buildGovernor()
	require.NoError(t, err)
	g := launchGovernor(t, bin, wrapper, env)
	require.Eventually(t, func() bool {
		return !g.alive() || g.learnAddrs(t)
	}, 20*time.Second, 10*time.Millisecond, "governor never wrote its start-up line (GOVERNOR_LOG_LEVEL must be info or debug)")
	if g.base == "" {
		t.Fatalf("governor exited at start-up; its stderr:\n%s", g.logs())
	}
	require.Eventually(t, func() bool { return !g.alive() || g.readyz() == 200 }, 20*time.Second, 10*time.Millisecond,
		"governor never became ready")
	require.True(t, g.alive(), "governor exited at start-up; its stderr:\n%s", g.logs())
	return g
}

// learnAddrs reports whether governor has written its start-up line, and
// takes its listeners' addresses from it.
func (g *governorProcess) learnAddrs(t *testing.T) bool {
	lines := g.logLines(t, "governor started")
	if len(lines) == 0 {
		return false
	}
	listen, _ := lines[0]["listen"].(string)
	admin, _ := lines[0]["admin_listen"].(string)
	require.NotEmpty(t, listen, "listen in the start-up line: %v", lines[0])
	require.NotEmpty(t, admin, "admin_listen in the start-up line: %v", lines[0])
	g.base, g.admin = listen, admin
	return true
}

// launchGovernor starts one governor process on ports of its choosing
// and kills it when the test ends.
func launchGovernor(t *testing.T, bin string, wrapper, env []string) *governorProcess {
	g := &governorProcess{stdout: &lockedWriter{w: &bytes.Buffer{}}, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	args := append(append([]string(nil), wrapper...), bin)
	g.cmd = exec.Command(args[0], args[1:]...)
	g.cmd.Env = append(os.Environ(), append(env, "GOVERNOR_LISTEN=127.0.0.1:0", "GOVERNOR_ADMIN_LISTEN=127.0.0.1:0")...)
	g.cmd.Stdout = g.stdout
	g.cmd.Stderr = &lockedWriter{w: g.stderr}
	require.NoError(t, g.cmd.Start())
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		<-g.exited
		if t.Failed() {
			t.Logf("governor stderr:\n%s", g.logs())
		}
	})
	return g
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// newLockedBuffer is a lockedWriter into a buffer, for output read while a
// process or a goroutine still writes it (String).
func newLockedBuffer() *lockedWriter { return &lockedWriter{w: &bytes.Buffer{}} }

// String is what was written so far, read under the writer's lock; the
// writer is a *bytes.Buffer (or another fmt.Stringer).
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(fmt.Stringer).String()
}

// oneShot is the HTTP client of these tests: one connection per request.
//
// A keep-alive connection left idle in a shared pool would race the drain:
// a draining server closes idle connections, and a POST a client sends on
// one at that instant is lost in flight (HTTP/1.1 allows the close, and
// Go's client does not replay a POST). That race belongs to the client's
// connection reuse, not to Governor's drain, which these tests check: every
// call here is a client with a connection of its own, as the probes are.
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func (g *governorProcess) readyz() int {
	resp, err := oneShot.Get("http://" + g.admin + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (g *governorProcess) queued(t *testing.T) int {
	resp, err := oneShot.Get("http://" + g.base + "/governor/lanes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Lanes []struct{ Queued int } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	n := 0
	for _, l := range out.Lanes {
		n += l.Queued
	}
	return n
}

func (g *governorProcess) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-g.exited:
		return g.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		// Ask for a goroutine dump (Go prints one on SIGQUIT) to show
		// what holds the process.
		_ = g.cmd.Process.Signal(syscall.SIGQUIT)
		<-g.exited
		t.Fatalf("governor did not exit within %s; its stderr:\n%s", within, g.stderr.String())
		return -1
	}
}

// answer is what one client got.
type answer struct {
	status int
	body   string
	err    error
}

func call(base string, stream bool, i int) answer {
	body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"call %d"}]}`, stream, i)
	resp, err := oneShot.Post("http://"+base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), err: err}
}

// runBatch runs a sync batch of n chat completions.
func runBatch(base string, n int) answer {
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"item %d"}]}}`, i)
	}
	b.WriteString(`]}`)
	resp, err := oneShot.Post("http://"+base+"/governor/batch", "application/json", strings.NewReader(b.String()))
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(body), err: err}
}

// completeBatch reports whether a is a batch answer with n completed items.
func completeBatch(a answer, n int) error {
	if a.err != nil {
		return a.err
	}
	if a.status != 200 {
		return fmt.Errorf("status %d: %s", a.status, a.body)
	}
	var doc struct {
		Outputs []json.RawMessage
		Summary struct {
			Completed int `json:"COMPLETED"`
		}
	}
	if err := json.Unmarshal([]byte(a.body), &doc); err != nil {
		return fmt.Errorf("%v: %q", err, a.body)
	}
	if len(doc.Outputs) != n || doc.Summary.Completed != n {
		return fmt.Errorf("want %d completed items: %s", n, a.body)
	}
	return nil
}

// complete reports whether a is a whole, successful answer.
func complete(a answer, stream bool) error {
	if a.err != nil {
		return a.err
	}
	if a.status != 200 {
		return fmt.Errorf("status %d: %s", a.status, a.body)
	}
	if stream {
		if !strings.HasSuffix(a.body, "data: [DONE]\n\n") {
			return fmt.Errorf("stream cut: %q", a.body)
		}
		return nil
	}
	var v struct{ Choices []any }
	if err := json.Unmarshal([]byte(a.body), &v); err != nil || len(v.Choices) == 0 {
		return fmt.Errorf("incomplete body %q", a.body)
	}
	return nil
}

func TestSIGTERMDrainsEveryCall(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 400 * time.Millisecond, ChunkDelay: 50 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=10", "GOVERNOR_DRAIN_TIMEOUT=30s")

	const calls, streams, items = 50, 5, 10
	answers := make([]answer, calls+streams)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = call(g.base, i >= calls, i) })
	}
	var batchAnswer answer
	wg.Go(func() { batchAnswer = runBatch(g.base, items) })
	require.Eventually(t, func() bool {
		st := mock.Stats()
		return st.InFlight > 0 && g.queued(t) > 0 && int(st.Received)+g.queued(t) == calls+streams+items
	}, 10*time.Second, 5*time.Millisecond, "every call and batch item must be in flight or queued when the signal comes")

	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return g.readyz() == 503 || g.readyz() == 0 }, 2*time.Second, 5*time.Millisecond,
		"/readyz turns 503 at once")
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", g.base, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 5*time.Second, 5*time.Millisecond, "the main listener stops taking connections")

	wg.Wait()
	for i, a := range answers {
		assert.NoError(t, complete(a, i >= calls), "call %d", i)
	}
	assert.NoError(t, completeBatch(batchAnswer, items), "the sync batch")
	assert.Equal(t, 0, g.exitCode(t, 30*time.Second))
	assert.Equal(t, int64(calls+streams+items), mock.Stats().Received, "every call and item reached the provider exactly once")
	assert.Contains(t, g.stderr.String(), `"msg":"drain in progress"`, "the drain reports what it waits for")
	assert.Contains(t, g.stderr.String(), `"msg":"drained"`)
}

func TestDrainTimeoutAnswersWhatCannotFinish(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 20 * time.Second})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=2", "GOVERNOR_AIMD_INITIAL=2", "GOVERNOR_DRAIN_TIMEOUT=500ms")

	answers := make([]answer, 6)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = call(g.base, false, i) })
	}
	require.Eventually(t, func() bool { return mock.Stats().InFlight == 2 && g.queued(t) == 4 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	wg.Wait()
	for i, a := range answers {
		require.NoError(t, a.err, "call %d: an answer, never a dropped connection", i)
		assert.Equal(t, 503, a.status, "call %d", i)
		assert.Contains(t, a.body, `"code":"draining"`, "call %d", i)
	}
	assert.Equal(t, 0, g.exitCode(t, 10*time.Second))
}

func TestSecondSignalExitsAtOnce(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{Latency: 20 * time.Second})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_DRAIN_TIMEOUT=60s")
	go call(g.base, false, 0)
	require.Eventually(t, func() bool {
		resp, err := oneShot.Get("http://" + g.admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "governor_in_flight_requests 1" {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return g.readyz() != 200 }, 2*time.Second, 5*time.Millisecond)
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, exitFailed, g.exitCode(t, 5*time.Second))
}
