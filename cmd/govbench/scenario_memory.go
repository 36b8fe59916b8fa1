package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Memory: what a waiting call costs. One lane is held at one call in
// flight (GOVERNOR_MAX_CONCURRENCY=1, GOVERNOR_AIMD_INITIAL=1) on a
// provider that takes an hour to answer; n more calls arrive, each on its
// own connection, and wait in the lane's queue. The figure is Governor's
// resident memory with them waiting, minus its idle memory, per waiting
// call: the connection, the buffered request and the queue entry.

// memoryLatency is the provider's latency: longer than any run.
const memoryLatency = time.Hour

// memoryResult is the outcome of the memory scenario.
type memoryResult struct {
	waiting  int   // calls in the queue when measured
	startRSS int64 // Governor's RSS once ready, before any call
	idleRSS  int64 // after one call answered: the lane and the upstream connection exist
	heldRSS  int64 // with the calls waiting
	heldHWM  int64
	// Go's own accounting (Governor's /metrics), idle and held: where the
	// memory of a waiting call goes.
	idleGo, heldGo goMemory
}

// goMemory is the part of Go's runtime statistics that explains RSS.
type goMemory struct {
	heap       float64 // go_memstats_heap_inuse_bytes
	stacks     float64 // go_memstats_stack_inuse_bytes
	goroutines float64 // go_goroutines
}

func readGoMemory(ctx context.Context, g *governor) (goMemory, error) {
	m, err := g.metrics(ctx)
	if err != nil {
		return goMemory{}, err
	}
	return goMemory{m["go_memstats_heap_inuse_bytes"], m["go_memstats_stack_inuse_bytes"], m["go_goroutines"]}, nil
}

// perCallGo is the growth of each of Go's figures per waiting call.
func (r memoryResult) perCallGo() goMemory {
	n := float64(max(r.waiting, 1))
	return goMemory{
		heap:       (r.heldGo.heap - r.idleGo.heap) / n,
		stacks:     (r.heldGo.stacks - r.idleGo.stacks) / n,
		goroutines: (r.heldGo.goroutines - r.idleGo.goroutines) / n,
	}
}

// perCall is the resident memory per waiting call above idle.
func (r memoryResult) perCall() float64 {
	if r.waiting == 0 {
		return 0
	}
	return float64(r.heldRSS-r.idleRSS) / float64(r.waiting)
}

// runMemory runs the memory scenario.
func runMemory(ctx context.Context, w *workspace, o *options, log io.Writer) (res memoryResult, err error) {
	n := o.memoryCalls
	if err := raiseOpenFiles(n + 1024); err != nil {
		return res, err
	}
	fmt.Fprintf(log, "govbench: memory, %d calls waiting\n", n)
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	m, err := startMock(ctx, w, "memory-mockllm", mockConfig{latency: memoryLatency, seed: o.seed})
	if err != nil {
		return res, err
	}
	g.add(m.Process)
	env := []string{
		"GOVERNOR_MAX_CONCURRENCY=1", "GOVERNOR_AIMD_INITIAL=1",
		"GOVERNOR_DRAIN_TIMEOUT=1s", // the call in flight would hold the stop for an hour
	}
	if n > 10000 { // Governor's default GOVERNOR_QUEUE_CAPACITY
		env = append(env, "GOVERNOR_QUEUE_CAPACITY="+strconv.Itoa(n))
	}
	gov, err := startGovernor(ctx, w, "memory-governor", m.url, append(env, o.governorEnv...)...)
	if err != nil {
		return res, err
	}
	g.add(gov.Process)
	u, err := readUsage(gov.PID())
	if err != nil {
		return res, err
	}
	res.startRSS = u.RSS

	url := gov.url + "/v1/chat/completions"
	body := chatBody(false)
	warm := newLoadClient(1)
	r := warm.call(ctx, time.Now(), request{url: url, body: body, header: http.Header{"X-Mock-Latency": {"0s"}}}, make([]byte, 32<<10))
	warm.close()
	if !r.ok() {
		return res, fmt.Errorf("memory: warm-up call: status %d: %v", r.Status, r.Err)
	}
	if u, err = readUsage(gov.PID()); err != nil {
		return res, err
	}
	res.idleRSS = u.RSS
	if res.idleGo, err = readGoMemory(ctx, gov); err != nil {
		return res, err
	}

	// n+1 calls: one in flight, n waiting.
	lctx, cancel := context.WithCancel(ctx)
	lc := newLoadClient(n + 1)
	var (
		wg       sync.WaitGroup
		answered atomic.Int64 // calls answered instead of waiting: queue full
	)
	defer func() {
		cancel() // the waiting calls leave the queue: their clients go away
		wg.Wait()
		lc.close()
	}()
	t0 := time.Now()
	for range n + 1 {
		wg.Go(func() {
			if r := lc.call(lctx, t0, request{url: url, body: body}, make([]byte, 4<<10)); !r.cancelled() {
				answered.Add(1)
			}
		})
	}
	li, err := waitQueued(ctx, gov, n, &answered)
	if err != nil {
		return res, err
	}
	if u, err = readUsage(gov.PID()); err != nil {
		return res, err
	}
	res.waiting, res.heldRSS, res.heldHWM = li.Queued, u.RSS, u.HWM
	if res.heldGo, err = readGoMemory(ctx, gov); err != nil {
		return res, err
	}
	return res, g.alive()
}

// waitQueued polls the lane until n calls wait in it; it fails when the
// calls that will never wait (answered holds them) make that impossible,
// or when a minute passes without progress.
func waitQueued(ctx context.Context, gov *governor, n int, answered *atomic.Int64) (laneInfo, error) {
	const stall = time.Minute
	var (
		last     int
		progress = time.Now()
	)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		li, err := gov.lanes(ctx)
		if err != nil {
			return li, err
		}
		switch a := int(answered.Load()); {
		case li.Queued >= n:
			return li, nil
		case a > 0: // n+1 calls were sent for one in flight and n waiting
			return li, fmt.Errorf("memory: %d calls answered at once instead of waiting (%d waiting)", a, li.Queued)
		case li.Queued != last:
			last, progress = li.Queued, time.Now()
		case time.Since(progress) > stall:
			return li, fmt.Errorf("memory: %d calls waiting, no progress for %v", li.Queued, stall)
		}
		select {
		case <-ctx.Done():
			return li, ctx.Err()
		case <-tick.C:
		}
	}
}
