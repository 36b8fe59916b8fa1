package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout bounds the wait for a process to exit after SIGTERM; then it
// is killed.
const stopTimeout = 10 * time.Second

// startTimeout bounds the wait for a process to be ready.
const startTimeout = 15 * time.Second

// process is one child process. Its output goes to a log file in the work
// directory, which is where its address is read from and what an error
// quotes. The goroutine that waits for it ends when it exits; stop makes
// sure it does.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed when the process has exited
	waitErr error         // set before exited is closed
	stopped bool          // stop was called: an exit is expected
	mu      sync.Mutex
}

// startProcess starts path with args and env, its stdout and stderr going
// to logPath.
func startProcess(name, path string, args, env []string, logPath string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// alive reports an error if the process exited without being asked to.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited unexpectedly (%v)%s", p.name, p.waitErr, p.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then kills. It returns an
// error if the process exited with a failure status. It may be called more
// than once.
func (p *process) stop() error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(stopTimeout)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("%s did not stop within %v after SIGTERM: killed", p.name, stopTimeout)
		}
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s: %w%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

// logTail is the end of the process's log, for error messages.
func (p *process) logTail() string {
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

// waitForLog polls the process's log until match finds what it wants in a
// line, the process exits, ctx ends or startTimeout passes.
func (p *process) waitForLog(ctx context.Context, match func(line string) (string, bool)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
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
		if err := p.alive(); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: not started: %w%s", p.name, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// waitHTTP polls url until it answers 200, the process exits, ctx ends or
// startTimeout passes.
func (p *process) waitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
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
		if err := p.alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not ready: %w%s", p.name, url, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// group owns the processes of one scenario and stops them in reverse order
// of start.
type group struct {
	procs []*process
}

func (g *group) add(p *process) *process {
	g.procs = append(g.procs, p)
	return p
}

// alive reports the first process that exited unexpectedly.
func (g *group) alive() error {
	for _, p := range g.procs {
		p.mu.Lock()
		stopped := p.stopped
		p.mu.Unlock()
		if !stopped {
			if err := p.alive(); err != nil {
				return err
			}
		}
	}
	return nil
}

// stopAll stops every process, the last started first.
func (g *group) stopAll() error {
	var errs []error
	for i := len(g.procs) - 1; i >= 0; i-- {
		if err := g.procs[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	g.procs = nil
	return errors.Join(errs...)
}
