package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// usage is what /proc says of a process, or of a process tree summed.
type usage struct {
	CPU time.Duration // utime + stime
	RSS int64         // resident bytes now (VmRSS)
	HWM int64         // peak resident bytes (VmHWM)
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat. It is 100 on
// every Linux architecture Go supports (USER_HZ, fixed by the kernel ABI).
const userHZ = 100

// readUsage reads the CPU time and memory of pid and of every child of pid
// (nginx's workers are children of its master process).
func readUsage(pid int) (usage, error) {
	pids := append([]int{pid}, children(pid)...)
	var u usage
	for _, p := range pids {
		cpu, _, err := readStat(p)
		if err != nil {
			return usage{}, err
		}
		rss, hwm, err := readStatus(p)
		if err != nil {
			return usage{}, err
		}
		u.CPU += cpu
		u.RSS += rss
		u.HWM += hwm
	}
	return u, nil
}

// readStat returns the CPU time (utime+stime) and parent pid of pid.
func readStat(pid int) (cpu time.Duration, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("proc stat: %w", err)
	}
	return parseStat(b)
}

// parseStat parses /proc/<pid>/stat. The command name (field 2) is in
// parentheses and may hold spaces and parentheses, so fields are counted
// from the last ')'.
func parseStat(b []byte) (cpu time.Duration, ppid int, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("proc stat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 13", len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, fmt.Errorf("proc stat: malformed fields in %q", b)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, ppid, nil
}

// readStatus returns VmRSS and VmHWM of pid in bytes.
func readStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("proc status: %w", err)
	}
	return parseStatus(b)
}

func parseStatus(b []byte) (rss, hwm int64, err error) {
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("proc status: malformed %s line %q", key, val)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("proc status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("proc status: VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}

// children lists the processes whose parent is pid. A process that exits
// while the list is built is left out.
func children(pid int) []int {
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if _, ppid, err := parseStat(b); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}
