package main

import (
	"fmt"
	"syscall"
)

// childAttr puts a child in its own process group, so that a Ctrl-C in the
// terminal reaches govbench alone (a second SIGINT would make Governor exit
// without draining; govbench stops its children itself), and kills the
// child if govbench dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// raiseOpenFiles raises the soft limit of open files to the hard limit,
// for govbench and the processes it starts (they inherit it; calling
// Setrlimit also stops Go from restoring the old soft limit for them), and
// fails if that is fewer than need.
func raiseOpenFiles(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("open files limit: %w", err)
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("open files: need %d, the hard limit is %d (raise it with ulimit -Hn, or lower -memory-calls)", need, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("open files limit: %w", err)
	}
	return nil
}
