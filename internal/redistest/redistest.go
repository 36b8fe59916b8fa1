// Package redistest runs a real redis-server for tests: a process of the
// test's own, on a free loopback port, with no persistence, that a test can
// kill and restart on the same port. A port picked free can be taken by
// another process before redis-server binds it: the server is known to be
// up only once its own log says it accepts connections, and a start whose
// port was taken meanwhile is tried again on another.
//
// Tests that need one are skipped when redis-server is not on PATH, with a
// message that says so, unless GOVERNOR_CI=1: in CI (.ci/run installs
// Debian's redis-server) a missing server fails the test.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // redis-server's own, after the test's

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Start starts redis-server on a free loopback port, with args added to
// its command line (--requirepass s3cret); it is killed when the test
// ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("GOVERNOR_CI") == "1" {
			t.Fatalf("redis-server is not on PATH, and GOVERNOR_CI=1 requires it (.ci/run installs it): %v", err)
		}
		t.Skip("redis-server is not on PATH: skipping a test of coordination over Redis (apt-get install redis-server)")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Kill)
	for try := 1; ; try++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if try == 5 || !strings.Contains(s.log(), "Address already in use") {
			t.Fatalf("redis-server on %s: %v; its log:\n%s", s.Addr(), err, s.log())
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Kill stops the server at once (SIGKILL); its data is lost.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a frozen server is killed too
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Freeze stops the server without closing its connections (SIGSTOP): it
// is there but answers nothing, as a Redis that is overloaded or behind a
// broken network. Thaw undoes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw lets a frozen server answer again (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port, empty, and waits until
// it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.RestartWith(s.args...)
}

// RestartWith is Restart with args in place of the server's added
// arguments, here and in later restarts.
func (s *Server) RestartWith(args ...string) {
	s.t.Helper()
	s.Kill()
	s.mu.Lock()
	s.args = args
	s.mu.Unlock()
	if err := s.start(); err != nil {
		s.t.Fatalf("redis-server on %s again: %v; its log:\n%s", s.Addr(), err, s.log())
	}
}

// readyLine is what redis-server logs once it listens.
const readyLine = "Ready to accept connections"

// start starts the server on s.port, with a new log, and waits until its
// log says it listens and it answers a PING, or it exits.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logFile := filepath.Join(s.dir, "redis.log")
	_ = os.Remove(logFile)
	cmd := exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", logFile}, s.args...)...)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("exited at start-up: %v", cmd.ProcessState)
		default:
		}
		// The log is the server's own: a PONG alone could come from
		// another process that took the port.
		if strings.Contains(s.log(), readyLine) && ping(s.Addr()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("not listening within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling for the server to listen
	}
}

// log returns the server's log so far.
func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// ping sends PING in RESP and waits for +PONG, or -NOAUTH from a server
// with a password.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}
