package proc

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func startSleep(t *testing.T) *Process {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	p, err := Start(Spec{Name: "sleep", Path: sleep, Args: []string{"60"}, LogPath: filepath.Join(t.TempDir(), "sleep.log")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKillEndsTheProcessAndIsExpected(t *testing.T) {
	p := startSleep(t)
	if err := p.Alive(); err != nil {
		t.Fatalf("Alive before Kill: %v", err)
	}
	p.Kill()
	select {
	case <-p.exited:
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if err := p.Alive(); err != nil {
		t.Fatalf("Alive after Kill: %v (a kill is expected, not a crash)", err)
	}
	p.Kill() // idempotent
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("Stop after Kill: %v (the kill was asked for)", err)
	}
}

func TestStopEndsTheProcessWithSIGTERM(t *testing.T) {
	p := startSleep(t)
	// sleep dies of SIGTERM: Stop reports the signal, not a timeout kill.
	err := p.Stop(5 * time.Second)
	if err == nil {
		t.Fatal("want the SIGTERM exit status reported")
	}
	if got := err.Error(); !strings.Contains(got, "terminated") {
		t.Fatalf("Stop: %v, want the SIGTERM exit status", err)
	}
}
