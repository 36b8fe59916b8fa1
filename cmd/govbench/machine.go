package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where a report's figures come from.
type machine struct {
	date     time.Time
	cpus     int
	cpuModel string
	kernel   string
	memory   string
	loadAvg  string // /proc/loadavg at the start: other work on the machine
	governor string // `governor -version`
	nginx    string
	commit   string
}

func readMachine(ctx context.Context, w *workspace) machine {
	m := machine{date: time.Now().UTC(), cpus: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.kernel = readTrimmed("/proc/sys/kernel/osrelease")
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, _ := strings.Cut(string(b), "\n"); strings.HasPrefix(line, "MemTotal:") {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb); err == nil {
				m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if f := strings.Fields(readTrimmed("/proc/loadavg")); len(f) >= 3 {
		m.loadAvg = strings.Join(f[:3], " ")
	}
	m.governor, _ = commandOutput(ctx, w.governorBin, "-version")
	if w.nginxBin != "" {
		m.nginx = nginxVersion(ctx, w.nginxBin)
	}
	if c, err := commandOutput(ctx, "git", "rev-parse", "--short", "HEAD"); err == nil {
		st, err := commandOutput(ctx, "git", "status", "--porcelain", "--untracked-files=no")
		m.commit = commitText(c, err == nil && st != "", w.governorGiven)
	}
	return m
}

// commitText describes the working tree's commit head for the report:
// whether it had uncommitted changes, and whether the Governor measured
// was built from it or given with -governor (whose commit govbench cannot
// tell: binaries built with -buildvcs=false carry none).
func commitText(head string, dirty, governorGiven bool) string {
	s := head
	if dirty {
		s += " (with uncommitted changes)"
	}
	if governorGiven {
		s += ", the working tree's; the Governor measured is the -governor binary"
	}
	return s
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// commandOutput runs a short command and returns its trimmed output,
// stdout and stderr together (nginx -v writes to stderr).
func commandOutput(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}
