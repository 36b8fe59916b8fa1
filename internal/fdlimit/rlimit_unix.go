//go:build unix

package fdlimit

import "syscall"

// Raise sets the soft limit on open files to the hard limit, and returns
// the limit in force. (The Go runtime does the same at start-up since Go
// 1.19; Raise makes sure of it and reports the figure.)
func Raise() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(lim.Cur), err
		}
		lim = raised
	}
	return uint64(lim.Cur), nil
}
