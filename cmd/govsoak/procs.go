package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBinaries builds cmd/governor and cmd/mockllm of the module that
// holds the working directory into dir.
func buildBinaries(ctx context.Context, dir string) (governor, mockllm string, err error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if root == "." || root == "" {
		return "", "", errors.New("run govsoak inside the governor module")
	}
	governor, mockllm = filepath.Join(dir, "governor"), filepath.Join(dir, "mockllm")
	for bin, pkg := range map[string]string{governor: "./cmd/governor", mockllm: "./cmd/mockllm"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return governor, mockllm, nil
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// process is a child process whose output goes to a log file. The
// goroutine that waits for it ends when it exits; stop makes sure it does.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error // set before exited is closed

	mu      sync.Mutex
	stopped bool
}

func startProcess(name, path string, args, env []string, logPath string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
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

// stop sends SIGTERM and waits up to timeout, then kills. It reports how
// the process exited.
func (p *process) stop(timeout time.Duration) error {
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
			return fmt.Errorf("%s did not exit within %v of SIGTERM: killed", p.name, timeout)
		}
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s: %w%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return fmt.Sprintf("\n--- %s (%s) ---\n%s", p.name, p.logPath, strings.TrimRight(string(b), "\n"))
}

// waitForLine waits for a line of the process's log that match accepts.
func (p *process) waitForLine(ctx context.Context, match func(string) (string, bool)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if f, err := os.Open(p.logPath); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := match(sc.Text()); ok {
					f.Close()
					return v, nil
				}
			}
			f.Close()
		}
		if err := p.alive(); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not start: %w%s", p.name, ctx.Err(), p.logTail())
		case <-tick.C:
		}
	}
}

// waitReady polls url until it answers 200.
func (p *process) waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := hc.Get(url); err == nil {
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

// system is the mockllm and governor processes of a run.
type system struct {
	mock, gov   *process
	mockURL     string // the provider's base URL
	base, admin string // Governor's main and admin base URLs
}

// startSystem starts mockllm with mockArgs and governor with govEnv in
// front of it, logs in dir.
func startSystem(ctx context.Context, dir, governorBin, mockBin string, mockArgs, govEnv []string) (*system, error) {
	s := &system{}
	var err error
	s.mock, err = startProcess("mockllm", mockBin, append([]string{"-listen", "127.0.0.1:0"}, mockArgs...), os.Environ(),
		filepath.Join(dir, "mockllm.log"))
	if err != nil {
		return nil, err
	}
	s.mockURL, err = s.mock.waitForLine(ctx, func(line string) (string, bool) {
		return strings.CutPrefix(line, "mockllm listening on ")
	})
	if err != nil {
		s.stop()
		return nil, err
	}
	mainAddr, err := freeAddr()
	if err != nil {
		s.stop()
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		s.stop()
		return nil, err
	}
	env := append(os.Environ(), "GOVERNOR_UPSTREAM="+s.mockURL, "GOVERNOR_ROUTES=anthropic="+s.mockURL,
		"GOVERNOR_LISTEN="+mainAddr, "GOVERNOR_ADMIN_LISTEN="+adminAddr)
	s.gov, err = startProcess("governor", governorBin, nil, append(env, govEnv...), filepath.Join(dir, "governor.log"))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.base, s.admin = "http://"+mainAddr, "http://"+adminAddr
	if err := s.gov.waitReady(ctx, s.admin+"/readyz"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// alive reports a process that died during the run.
func (s *system) alive() error {
	if err := s.mock.alive(); err != nil {
		return err
	}
	if s.gov != nil {
		return s.gov.alive()
	}
	return nil
}

// stop stops governor (it drains) and then mockllm.
func (s *system) stop() error {
	var errs []error
	if s.gov != nil {
		errs = append(errs, s.gov.stop(60*time.Second))
	}
	if s.mock != nil {
		errs = append(errs, s.mock.stop(20*time.Second))
	}
	return errors.Join(errs...)
}
