package main

import (
	"errors"
	"time"

	"github.com/llmgovernor/governor/internal/proc"
)

// stopTimeout bounds the wait for a process to exit after SIGTERM; then it
// is killed.
const stopTimeout = 10 * time.Second

// startProcess starts path with args and env, its stdout and stderr going
// to logPath, in its own process group (childAttr).
func startProcess(name, path string, args, env []string, logPath string) (*proc.Process, error) {
	return proc.Start(proc.Spec{Name: name, Path: path, Args: args, Env: env, LogPath: logPath, SysProcAttr: childAttr()})
}

// group owns the processes of one scenario and stops them in reverse order
// of start.
type group struct {
	procs []*proc.Process
}

func (g *group) add(p *proc.Process) {
	g.procs = append(g.procs, p)
}

// alive reports the first process that exited unexpectedly (a stopped one
// did not).
func (g *group) alive() error {
	for _, p := range g.procs {
		if err := p.Alive(); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops every process, the last started first.
func (g *group) stopAll() error {
	var errs []error
	for i := len(g.procs) - 1; i >= 0; i-- {
		if err := g.procs[i].Stop(stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	g.procs = nil
	return errors.Join(errs...)
}
