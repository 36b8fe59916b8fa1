package main

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryLimits are the files that hold the memory limit of the
// process's cgroup, in a container: cgroup v2's, then v1's.
var cgroupMemoryLimits = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit returns the memory Governor may use, as far as it knows: the
// lower of GOMEMLIMIT and its cgroup's memory limit, or 0 when neither is
// set.
func memoryLimit() int64 {
	limit := debug.SetMemoryLimit(-1) // math.MaxInt64 when GOMEMLIMIT is unset
	for _, f := range cgroupMemoryLimits {
		if b, err := os.ReadFile(f); err == nil {
			if n, ok := parseCgroupMemoryLimit(b); ok {
				limit = min(limit, n)
			}
			break
		}
	}
	if limit == math.MaxInt64 {
		return 0
	}
	return limit
}

// parseCgroupMemoryLimit parses the content of a cgroup memory limit file
// and reports whether it sets a limit: "max" (v2) and v1's page-rounded
// MaxInt64 do not.
func parseCgroupMemoryLimit(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}
