//go:build !unix

package fdlimit

// Raise does nothing where there is no RLIMIT_NOFILE; it returns 0.
func Raise() (uint64, error) { return 0, nil }
