// Package proc starts, watches and stops child processes for Governor's load
// tools (govbench, govsoak). Those tools measure Governor as it really runs:
// real processes talking over loopback, not handlers in the test binary, so
// that what they report (CPU, memory, drain on SIGTERM, crashes) is the
// process's own. Each child's output goes to a log file, which is where its
// address is read from and what an error quotes; the package keeps the
// bookkeeping of that in one place: waiting for a log line or an HTTP
// endpoint, noticing an unexpected exit, and stopping with SIGTERM and then
// SIGKILL.
package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes a process to start.
type Spec struct {
	Name    string   // for error messages
	Path    string   // the executable
	Args    []string // its arguments, without the program name
	Env     []string // its environment; nil is the parent's
	LogPath string   // where its stdout and stderr go; created or truncated
	// SysProcAttr, if set, is passed to the process (process group,
	// parent-death signal, …).
	SysProcAttr *syscall.SysProcAttr
}

// Process is one child process. The goroutine that waits for it ends when it
// exits; Stop makes sure it does.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when the process has exited
	waitErr error         // set before exited is closed

	mu      sync.Mutex
	stopped bool // Stop or Kill was called: an exit is expected
	killed  bool // Kill was called: its exit status is no error
}

// Start starts the process that s describes.
func Start(s Spec) (*Process, error) {
	f, err := os.Create(s.LogPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", s.Name, err)
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = s.SysProcAttr
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: start %s: %w", s.Name, s.Path, err)
	}
	p := &Process{name: s.Name, cmd: cmd, logPath: s.LogPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// Name is the process's name, as given to Start.
func (p *Process) Name() string { return p.name }

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// LogPath is the file that receives the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Alive reports an error if the process exited without Stop being called.
func (p *Process) Alive() error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	select {
	case <-p.exited:
		if !stopped {
			return fmt.Errorf("%s exited unexpectedly (%v)%s", p.name, p.waitErr, p.logTail())
		}
	default:
	}
	return nil
}

// Stop sends SIGTERM, waits up to timeout, then kills. It returns an error
// if the process had to be killed or exited with a failure status. It may be
// called more than once.
func (p *Process) Stop(timeout time.Duration) error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("%s did not stop within %v after SIGTERM: killed", p.name, timeout)
		}
	}
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if p.waitErr != nil && !killed {
		return fmt.Errorf("%s: %w%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to exit, as a crash or an
// OOM kill would end it: it gets no chance to clean up. The exit is
// expected: neither Alive nor a later Stop reports it. It may be called
// more than once, and after Stop.
func (p *Process) Kill() {
	p.mu.Lock()
	p.stopped, p.killed = true, true
	p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// logTail is the end of the process's log, for error messages: empty if
// there is none, else a header line and up to 2000 bytes.
func (p *Process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return fmt.Sprintf("\n--- %s (%s) ---\n%s", p.name, p.logPath, strings.TrimRight(string(b), "\n"))
}

// StartTimeout bounds how long WaitForLine and WaitHTTP wait for a process
// to be ready.
const StartTimeout = 20 * time.Second

// WaitForLine polls the process's log until match accepts a line, and
// returns what match returned for it. It fails if the process exits, ctx
// ends or StartTimeout passes first.
func (p *Process) WaitForLine(ctx context.Context, match func(line string) (string, bool)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(p.logPath); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := match(line); ok {
					return v, nil
				}
			}
		}
		if err := p.Alive(); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: not started: %w%s", p.name, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// WaitHTTP polls url until it answers 200. It fails if the process exits,
// ctx ends or StartTimeout passes first.
func (p *Process) WaitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := p.Alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not ready: %w%s", p.name, url, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago, for
// a child that cannot report a port it picked itself.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
