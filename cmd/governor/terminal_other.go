//go:build !linux

package main

import (
	"io"
	"os"
)

// isTerminal reports whether w is a terminal (the log format "auto" picks
// text for one, JSON otherwise). Outside Linux, any character device
// counts.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// terminalWidth returns the columns of the terminal w is; outside Linux,
// 0: unknown.
func terminalWidth(io.Writer) int { return 0 }
