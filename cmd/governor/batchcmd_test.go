package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
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

	"github.com/llmgovernor/governor/internal/batchcli"
	"github.com/llmgovernor/governor/internal/leakcheck"
	"github.com/llmgovernor/governor/mockllm"
)

// writeInput writes an OpenAI Batch JSONL file of n chat completions,
// custom ids q-0 … q-(n-1); the items in bad ask for a path the provider
// does not have (404, which no retry fixes).
func writeInput(t *testing.T, n int, bad ...int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		path := "/v1/chat/completions"
		for _, j := range bad {
			if i == j {
				path = "/v1/no-such-api"
			}
		}
		fmt.Fprintf(&b, `{"custom_id":"q-%d","method":"POST","url":%q,"body":{"model":"m","messages":[{"role":"user","content":"item %d"}]}}`+"\n", i, path, i)
	}
	p := filepath.Join(t.TempDir(), "input.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}

// resultLine is one line of the OpenAI Batch output format.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int `json:"status_code"`
	} `json:"response"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// readResults parses a results file, one line per item.
func readResults(t *testing.T, path string) []resultLine {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []resultLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l resultLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "line %q", sc.Text())
		out = append(out, l)
	}
	require.NoError(t, sc.Err())
	return out
}

// assertInOrder checks that results has one line per item, in input order.
func assertInOrder(t *testing.T, results []resultLine, n int) {
	t.Helper()
	require.Len(t, results, n)
	for i, l := range results {
		assert.Equal(t, fmt.Sprintf("q-%d", i), l.CustomID, "line %d", i)
	}
}

// cliProcess is one `governor batch` run of the built binary.
type cliProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer
	exited         chan struct{}
}

func startCLI(t *testing.T, env []string, args ...string) *cliProcess {
	t.Helper()
	bin, err := buildGovernor()
	require.NoError(t, err)
	c := &cliProcess{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, append([]string{"batch"}, args...)...)
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout = &lockedWriter{w: c.stdout}
	c.cmd.Stderr = &lockedWriter{w: c.stderr}
	require.NoError(t, c.cmd.Start())
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("governor batch stderr:\n%s", c.stderrText())
		}
	})
	return c
}

func (c *cliProcess) stderrText() string {
	return c.cmd.Stderr.(*lockedWriter).String()
}

func (c *cliProcess) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-c.exited:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("governor batch did not exit within %s; its stderr:\n%s", within, c.stderrText())
		return -1
	}
}

// jobID reads the job id the CLI printed at submission.
func (c *cliProcess) jobID(t *testing.T) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(c.stderrText(), " -job ")
		if !ok {
			return false
		}
		id, _, ok = strings.Cut(rest, " ")
		return ok
	}, 10*time.Second, 10*time.Millisecond, "the job id is printed at submission")
	return id
}

// noKeys keeps the test's own environment's provider keys out of the CLI.
var noKeys = []string{"OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GOVERNOR_API_TOKEN="}

func TestBatchCommandWritesResultsInOrder(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 5 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_API_TOKEN=tok")
	env := append(noKeys, "GOVERNOR_API_TOKEN=tok", "OPENAI_API_KEY=sk-test")
	out := filepath.Join(t.TempDir(), "results.jsonl")

	c := startCLI(t, env, "-url", "http://"+g.base, "-o", out, "-poll", "50ms", writeInput(t, 30))
	require.Equal(t, 0, c.exitCode(t, 60*time.Second), "every item completed")
	results := readResults(t, out)
	assertInOrder(t, results, 30)
	for i, l := range results {
		require.NotNil(t, l.Response, "line %d", i)
		assert.Equal(t, 200, l.Response.StatusCode, "line %d", i)
	}
	assert.Contains(t, c.stderrText(), "30 completed")
	assert.Empty(t, c.stdout.String(), "results go to -o")
	assertShellMode(t, out)
	assert.Equal(t, int64(30), mock.Stats().Received)

	// Results on stdout; an item the provider refuses: exit 1.
	c = startCLI(t, env, "-url", "http://"+g.base, "-poll", "50ms", writeInput(t, 10, 4))
	require.Equal(t, 1, c.exitCode(t, 60*time.Second), "an item failed")
	stdout := filepath.Join(t.TempDir(), "stdout.jsonl")
	require.NoError(t, os.WriteFile(stdout, c.stdout.Bytes(), 0o600))
	results = readResults(t, stdout)
	assertInOrder(t, results, 10)
	require.NotNil(t, results[4].Response)
	assert.Equal(t, 404, results[4].Response.StatusCode, "the provider's answer is kept")
	assert.Contains(t, c.stderrText(), "1 failed")

	// Input Governor rejects: a usage error, nothing runs. (Flags may
	// follow the input file.)
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"custom_id\":\"a\",\"url\":\"/v1/chat/completions\",\"body\":{}}\nnot json\n"), 0o600))
	c = startCLI(t, env, bad, "-url", "http://"+g.base)
	assert.Equal(t, 2, c.exitCode(t, 30*time.Second))
	assert.Contains(t, c.stderrText(), "line 2")

	// Without the API token, Governor refuses: nothing was submitted.
	c = startCLI(t, noKeys, "-url", "http://"+g.base, writeInput(t, 3))
	assert.Equal(t, 1, c.exitCode(t, 30*time.Second))
	assert.Contains(t, c.stderrText(), "X-Governor-Token")
	assert.Equal(t, int64(40), mock.Stats().Received, "nothing more reached the provider")
}

// assertShellMode checks that path has the mode of a file the shell
// creates with > in the same directory: 0666 less the umask.
func assertShellMode(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(filepath.Join(filepath.Dir(path), "shell-made"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	want, err := os.Stat(f.Name())
	require.NoError(t, err)
	got, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, want.Mode().Perm(), got.Mode().Perm(), "%s is readable as a file made with > would be", path)
}

func TestBatchCommandUsage(t *testing.T) {
	input := writeInput(t, 1)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"no input", nil, nil, "an input file, or -job ID"},
		{"two inputs", []string{input, input}, nil, "one input file"},
		{"job and input", []string{"-job", "batch_x", input}, nil, "give no input file"},
		{"bad header", []string{"-H", "no colon", input}, nil, "Name: value"},
		{"bad url", []string{"-url", "127.0.0.1:8080", input}, nil, "-url"},
		{"unknown flag", []string{"-frobnicate", input}, nil, "frobnicate"},
		{"unknown flag after the input", []string{input, "-frobnicate"}, nil, "frobnicate"},
		{"two inputs around a flag", []string{input, "-o", filepath.Join(t.TempDir(), "out.jsonl"), input}, nil, "one input file"},
		{"two inputs after --", []string{"--", input, "-o"}, nil, "one input file, got 2"},
		{"missing file", []string{filepath.Join(t.TempDir(), "nope.jsonl")}, nil, "no such file"},
		{"output directory missing", []string{"-o", filepath.Join(t.TempDir(), "no", "out.jsonl"), input}, nil, "no such file or directory"},
		{"output is a directory", []string{"-o", t.TempDir(), input}, nil, "is a directory"},
		{"both keys for a mixed input", []string{writeMixedInput(t)},
			[]string{"OPENAI_API_KEY=sk-o", "ANTHROPIC_API_KEY=sk-a"}, "split it in two"},
	} {
		var stdout, stderr bytes.Buffer
		code := runBatchCommand(tc.args, tc.env, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, 2, code, tc.name)
		assert.Contains(t, stderr.String(), tc.want, tc.name)
		assert.Contains(t, stderr.String(), "Usage:", tc.name)
		assert.NotContains(t, stderr.String(), ".governor-batch", "%s: no name of a file the command made up", tc.name)
	}

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, runBatchCommand([]string{"-h"}, nil, strings.NewReader(""), &stdout, &stderr))
	assert.Contains(t, stdout.String(), "governor batch [flags] input.jsonl")
	stdout.Reset()
	assert.Equal(t, 0, run([]string{"-h"}, nil, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "governor batch [-url URL] [-o FILE] [-job ID]", "governor -h tells of the subcommand")
}

func writeMixedInput(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "mixed.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}`+"\n"+
			`{"custom_id":"b","method":"POST","url":"/anthropic/v1/messages","body":{}}`+"\n"), 0o600))
	return p
}

// relay forwards TCP connections to a target until it is cut: then it
// closes the connections it carries and every new one, as a network that
// drops does, until it is restored. Its target can change, as a Service's
// does when its pod is replaced.
type relay struct {
	ln net.Listener

	mu      sync.Mutex
	target  string
	cut     bool
	dropped int // connections refused while cut
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	t.Cleanup(func() {
		ln.Close()
		r.setCut(true)
		r.wg.Wait()
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.cut {
			r.dropped++
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.conns[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(c) })
	}
}

func (r *relay) pipe(c net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.Close()
	}()
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.conns[up] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, up)
		r.mu.Unlock()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

func (r *relay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for c := range r.conns {
			c.Close()
		}
	}
}

func (r *relay) setTarget(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target = target
}

func (r *relay) droppedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// jobState returns the status Governor reports for job id.
func jobState(t *testing.T, base, id string) string {
	resp, err := oneShot.Get("http://" + base + "/governor/batches/" + url.PathEscape(id))
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct{ Status string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st.Status
}

func TestBatchCommandReattachesAfterDroppedConnection(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 50 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=2")
	r := startRelay(t, g.base)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	const n = 60
	c := startCLI(t, noKeys, "-url", "http://"+r.addr(), "-o", out, "-poll", "20ms", writeInput(t, n))
	id := c.jobID(t)
	require.Equal(t, "running", jobState(t, g.base, id))

	r.setCut(true) // the CLI's connection drops, and so does every new one
	require.Eventually(t, func() bool { return r.droppedCount() >= 3 }, 10*time.Second, 5*time.Millisecond,
		"the CLI keeps trying")
	assert.Contains(t, c.stderrText(), "lost Governor")
	r.setCut(false)

	require.Equal(t, 0, c.exitCode(t, 60*time.Second))
	assert.Contains(t, c.stderrText(), "reattached to job "+id)
	assertInOrder(t, readResults(t, out), n)
	assert.Equal(t, int64(n), mock.Stats().Received, "each item sent once: the job was not submitted again")
}

// A Governor killed while the command waits, and started again on the
// same batch directory, finishes the job; the command reattaches by
// itself and writes every result, in input order.
func TestBatchCommandSurvivesGovernorRestart(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 15 * time.Millisecond})
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_BATCH_DIR=" + t.TempDir(), "GOVERNOR_MAX_CONCURRENCY=4"}
	g := startGovernor(t, env...)
	r := startRelay(t, g.base)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	const n = 300
	c := startCLI(t, noKeys, "-url", "http://"+r.addr(), "-o", out, "-poll", "20ms", writeInput(t, n))
	id := c.jobID(t)
	require.Eventually(t, func() bool { return mock.Stats().Received >= n/4 }, 20*time.Second, time.Millisecond)
	require.NoError(t, g.cmd.Process.Kill())
	<-g.exited
	require.Eventually(t, func() bool { return strings.Contains(c.stderrText(), "lost Governor") },
		10*time.Second, 5*time.Millisecond, "the command notices")
	require.Less(t, mock.Stats().Received, int64(n), "the job was cut short")

	g = startGovernor(t, env...)
	r.setTarget(g.base)
	require.Equal(t, 0, c.exitCode(t, 60*time.Second))
	assert.Contains(t, c.stderrText(), "reattached to job "+id)
	results := readResults(t, out)
	assertInOrder(t, results, n)
	for i, l := range results {
		require.NotNil(t, l.Response, "line %d", i)
		assert.Equal(t, 200, l.Response.StatusCode, "line %d", i)
	}
}

// A -job id Governor does not have is a bad argument: the command says
// so, names the id, and exits 2 at once, as for a mistyped flag.
func TestBatchCommandUnknownJob(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	var stdout, stderr bytes.Buffer
	code := runBatchCommand([]string{"-url", "http://" + g.base, "-o", out, "-job", "batch_nope"}, noKeys,
		strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "-job batch_nope: Governor at http://"+g.base+" has no such job")
	assert.Contains(t, stderr.String(), `no batch job "batch_nope"`, "Governor's own reason")
	assert.Empty(t, stdout.String())
	assert.NoFileExists(t, out)
}

// Without a batch directory a restart loses the job: the command says so
// and why, and exits 1.
func TestBatchCommandJobLostInRestart(t *testing.T) {
	_, mockURL := startMock(t, mockllm.Config{Latency: 50 * time.Millisecond})
	env := []string{"GOVERNOR_UPSTREAM=" + mockURL, "GOVERNOR_MAX_CONCURRENCY=1"}
	g := startGovernor(t, env...)
	r := startRelay(t, g.base)
	c := startCLI(t, noKeys, "-url", "http://"+r.addr(), "-poll", "20ms", writeInput(t, 100))
	c.jobID(t)
	require.NoError(t, g.cmd.Process.Kill())
	<-g.exited
	require.Eventually(t, func() bool { return strings.Contains(c.stderrText(), "lost Governor") },
		10*time.Second, 5*time.Millisecond)
	g = startGovernor(t, env...)
	r.setTarget(g.base)
	require.Equal(t, 1, c.exitCode(t, 30*time.Second))
	assert.Contains(t, c.stderrText(), "GOVERNOR_BATCH_DIR")
}

func TestBatchCommandInterruptLeavesJobRunning(t *testing.T) {
	mock, mockURL := startMock(t, mockllm.Config{Latency: 50 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=2")
	out := filepath.Join(t.TempDir(), "results.jsonl")

	const n = 60
	c := startCLI(t, noKeys, "-url", "http://"+g.base, "-o", out, "-poll", "20ms", writeInput(t, n))
	id := c.jobID(t)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGINT)) // stdin is not a terminal: no question
	require.Equal(t, 1, c.exitCode(t, 10*time.Second))
	assert.Contains(t, c.stderrText(), "keeps running in Governor")
	assert.NoFileExists(t, out)
	assert.Equal(t, "running", jobState(t, g.base, id), "the job was left running")

	c = startCLI(t, noKeys, "-url", "http://"+g.base, "-o", out, "-poll", "20ms", "-job", id)
	require.Equal(t, 0, c.exitCode(t, 60*time.Second))
	assertInOrder(t, readResults(t, out), n)
	assert.Equal(t, int64(n), mock.Stats().Received)
}

// On a terminal, Ctrl-C asks; "y" cancels the job, and the items that
// had not started are reported as did not run.
func TestBatchCommandInterruptCancelsWhenTold(t *testing.T) {
	leakcheck.Check(t)
	_, mockURL := startMock(t, mockllm.Config{Latency: 50 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=1")
	out := filepath.Join(t.TempDir(), "results.jsonl")
	interrupt := make(chan os.Signal, 1)
	stderr := newLockedBuffer()
	code := make(chan int, 1)
	go func() {
		code <- batchcli.Run(context.Background(), batchcli.Config{
			URL: "http://" + g.base, Input: writeInput(t, 200), Output: out, Poll: 20 * time.Millisecond,
			Interrupt: interrupt, Stdin: strings.NewReader("y\n"), StdinTerminal: true, Stderr: stderr,
		})
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "submitted") }, 10*time.Second, 5*time.Millisecond)
	interrupt <- syscall.SIGINT
	require.Equal(t, 1, <-code)

	text := stderr.String()
	assert.Contains(t, text, "cancel job")
	assert.Contains(t, text, "cancelled job")
	results := readResults(t, out)
	assertInOrder(t, results, 200)
	require.NotNil(t, results[199].Error, "the last item never started")
	assert.Equal(t, "did_not_run", results[199].Error.Code)
}

// A job that finishes while Ctrl-C's question waits for its answer is
// not lost when the answer is "y": cancelling a finished job leaves it
// as it is, and its results are written.
func TestBatchCommandCancelOfAFinishedJobKeepsItsResults(t *testing.T) {
	leakcheck.Check(t)
	mock, mockURL := startMock(t, mockllm.Config{Latency: 20 * time.Millisecond})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL, "GOVERNOR_MAX_CONCURRENCY=4")
	out := filepath.Join(t.TempDir(), "results.jsonl")
	interrupt := make(chan os.Signal, 1)
	stderr := newLockedBuffer()
	said := func(s string) bool { return strings.Contains(stderr.String(), s) }
	answer, typed := io.Pipe()
	code := make(chan int, 1)
	const n = 20
	go func() {
		code <- batchcli.Run(context.Background(), batchcli.Config{
			URL: "http://" + g.base, Input: writeInput(t, n), Output: out, Poll: 20 * time.Millisecond,
			Interrupt: interrupt, Stdin: answer, StdinTerminal: true, Stderr: stderr,
		})
	}()
	require.Eventually(t, func() bool { return said("submitted") }, 10*time.Second, 5*time.Millisecond)
	interrupt <- syscall.SIGINT
	require.Eventually(t, func() bool { return said("cancel job") }, 10*time.Second, 5*time.Millisecond)
	var id string
	for _, f := range strings.Fields(stderr.String()) {
		if strings.HasPrefix(f, "batch_") {
			id = strings.TrimRight(f, "?:;,.")
			break
		}
	}
	require.NotEmpty(t, id)
	require.Eventually(t, func() bool { return jobState(t, g.base, id) == "completed" }, 30*time.Second, 10*time.Millisecond,
		"the job finishes while the question waits")
	_, err := typed.Write([]byte("y\n"))
	require.NoError(t, err)
	require.Equal(t, 0, <-code, "every item completed; stderr:\n%s", stderr.String())
	assertInOrder(t, readResults(t, out), n)
	assert.Equal(t, "completed", jobState(t, g.base, id), "the job is still held, its results unread by anyone else")
	assert.Equal(t, int64(n), mock.Stats().Received)
}
