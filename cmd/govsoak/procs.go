package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgovernor/governor/internal/proc"
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

// system is the mockllm and governor processes of a run.
type system struct {
	mock, gov   *proc.Process
	mockURL     string // the provider's base URL
	base, admin string // Governor's main and admin base URLs
}

// startSystem starts mockllm with mockArgs and governor with govEnv in
// front of it, logs in dir.
func startSystem(ctx context.Context, dir, governorBin, mockBin string, mockArgs, govEnv []string) (*system, error) {
	s := &system{}
	var err error
	s.mock, err = proc.Start(proc.Spec{Name: "mockllm", Path: mockBin, Args: append([]string{"-listen", "127.0.0.1:0"}, mockArgs...),
		Env: os.Environ(), LogPath: filepath.Join(dir, "mockllm.log")})
	if err != nil {
		return nil, err
	}
	s.mockURL, err = s.mock.WaitForLine(ctx, func(line string) (string, bool) {
		return strings.CutPrefix(line, "mockllm listening on ")
	})
	if err != nil {
		s.stop()
		return nil, err
	}
	mainAddr, err := proc.FreeAddr()
	if err != nil {
		s.stop()
		return nil, err
	}
	adminAddr, err := proc.FreeAddr()
	if err != nil {
		s.stop()
		return nil, err
	}
	env := append(os.Environ(), "GOVERNOR_UPSTREAM="+s.mockURL, "GOVERNOR_ROUTES=anthropic="+s.mockURL,
		"GOVERNOR_LISTEN="+mainAddr, "GOVERNOR_ADMIN_LISTEN="+adminAddr)
	s.gov, err = proc.Start(proc.Spec{Name: "governor", Path: governorBin, Env: append(env, govEnv...), LogPath: filepath.Join(dir, "governor.log")})
	if err != nil {
		s.stop()
		return nil, err
	}
	s.base, s.admin = "http://"+mainAddr, "http://"+adminAddr
	if err := s.gov.WaitHTTP(ctx, s.admin+"/readyz"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// alive reports a process that died during the run.
func (s *system) alive() error {
	if err := s.mock.Alive(); err != nil {
		return err
	}
	if s.gov != nil {
		return s.gov.Alive()
	}
	return nil
}

// stop stops governor (it drains) and then mockllm.
func (s *system) stop() error {
	var errs []error
	if s.gov != nil {
		errs = append(errs, s.gov.Stop(60*time.Second))
	}
	if s.mock != nil {
		errs = append(errs, s.mock.Stop(20*time.Second))
	}
	return errors.Join(errs...)
}
