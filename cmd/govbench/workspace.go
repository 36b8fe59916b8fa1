package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// workspace is the temporary directory of one govbench run: binaries,
// nginx's configuration and the log of every process started.
type workspace struct {
	dir         string
	governorBin string
	// governorGiven: governorBin is -governor's, not built here from the
	// working tree, so the working tree's commit may not be the one
	// measured.
	governorGiven bool
	mockBin       string
	nginxBin      string // empty when nginx is skipped
	nginxNote     string // why nginx is skipped
	redisBin      string // empty when the rows coordinated over Redis are skipped
	redisNote     string // why it is skipped
}

// Import paths of the binaries govbench builds; `go build` resolves them in
// the module of the working directory.
const (
	governorPkg = "github.com/llmgovernor/governor/cmd/governor"
	mockPkg     = "github.com/llmgovernor/governor/cmd/mockllm"
)

// newWorkspace creates the work directory and provides the binaries: those
// given in o, or built as the Dockerfile builds Governor.
func newWorkspace(ctx context.Context, o *options, log io.Writer) (*workspace, error) {
	dir, err := os.MkdirTemp("", "govbench-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	w := &workspace{dir: dir, governorBin: o.governorBin, governorGiven: o.governorBin != "", mockBin: o.mockBin}
	for _, b := range []struct {
		path *string
		pkg  string
	}{{&w.governorBin, governorPkg}, {&w.mockBin, mockPkg}} {
		if *b.path != "" {
			if *b.path, err = filepath.Abs(*b.path); err != nil {
				return w, err
			}
			continue
		}
		*b.path = filepath.Join(dir, filepath.Base(b.pkg))
		fmt.Fprintf(log, "govbench: building %s\n", b.pkg)
		if err := build(ctx, b.pkg, *b.path); err != nil {
			return w, err
		}
	}
	w.nginxBin, w.nginxNote = findTool("nginx", o.nginxBin, "the overhead comparison", "nginx")
	w.redisBin, w.redisNote = findTool("redis", o.redisBin, "S4 and S2 shared with coordination", "redis-server")
	return w, nil
}

// build compiles pkg to out with the Dockerfile's flags, so that the
// benchmark measures the binary users run.
func build(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// findTool resolves the binary of a comparison peer (flag -flag, the
// Debian package pkg), also in /usr/sbin (not on every user's PATH), or
// says why what needs it is skipped.
func findTool(flag, name, what, pkg string) (path, note string) {
	if name == "" {
		return "", fmt.Sprintf("%s skipped (-%s is empty)", what, flag)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, ""
	}
	if !strings.Contains(name, "/") {
		if p, err := exec.LookPath(filepath.Join("/usr/sbin", name)); err == nil {
			return p, ""
		}
	}
	return "", fmt.Sprintf("%s skipped: %q not found (apt-get install -y %s)", what, name, pkg)
}

// close removes the work directory unless keep is set.
func (w *workspace) close(keep bool, log io.Writer) {
	if keep {
		fmt.Fprintf(log, "govbench: work directory kept: %s\n", w.dir)
		return
	}
	_ = os.RemoveAll(w.dir)
}
