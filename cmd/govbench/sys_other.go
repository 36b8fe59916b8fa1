//go:build !linux

package main

import "syscall"

// childAttr puts a child in its own process group, so that a Ctrl-C in the
// terminal reaches govbench alone. (govbench reads /proc, so its figures
// need Linux; elsewhere it builds but the scenarios fail.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// raiseOpenFiles does nothing outside Linux.
func raiseOpenFiles(need int) error { return nil }
