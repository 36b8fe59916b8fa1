package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The machine is shared: other work on it slows every target of the
// overhead scenario alike (they are measured back to back), but it lowers
// every absolute figure and widens the tails. noiseMeter measures how much
// CPU processes other than govbench and its children used meanwhile, so
// that a report says how quiet the machine was.

// noiseMeter compares the machine's busy CPU time with that of govbench
// and the processes it measures over a stretch of time.
type noiseMeter struct {
	pids        []int // child processes; each with its children
	start       time.Time
	busy0, our0 time.Duration
}

func startNoise(pids ...int) (*noiseMeter, error) {
	n := &noiseMeter{pids: pids, start: time.Now()}
	var err error
	if n.busy0, err = machineBusy(); err != nil {
		return nil, err
	}
	if n.our0, err = n.ours(); err != nil {
		return nil, err
	}
	return n, nil
}

// ours is the CPU time of govbench and of its measured processes.
func (n *noiseMeter) ours() (time.Duration, error) {
	t, _, err := readStat(os.Getpid())
	if err != nil {
		return 0, err
	}
	for _, pid := range n.pids {
		u, err := readUsage(pid)
		if err != nil {
			return 0, err
		}
		t += u.CPU
	}
	return t, nil
}

// otherShare is the share of the machine's CPU capacity (all cores) that
// other processes used since startNoise.
func (n *noiseMeter) otherShare() (float64, error) {
	busy, err := machineBusy()
	if err != nil {
		return 0, err
	}
	our, err := n.ours()
	if err != nil {
		return 0, err
	}
	capacity := time.Since(n.start) * time.Duration(runtime.NumCPU())
	other := (busy - n.busy0) - (our - n.our0)
	return max(0, float64(other)/float64(capacity)), nil
}

// machineBusy is the time all CPUs spent busy since boot: /proc/stat's
// first line, user+nice+system+irq+softirq+steal.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	return parseMachineBusy(string(b))
}

func parseMachineBusy(s string) (time.Duration, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("proc stat: unexpected first line %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
