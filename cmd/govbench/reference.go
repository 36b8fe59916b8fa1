package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// The reference of a knee cell: the same calls sent straight to a server
// of the same kind by exactly as many closed-loop clients as its knee, so
// that it never runs beyond it. Its makespan is what "running at the knee"
// takes, measured in the same run as the Governor it is compared with:
// the latency's lognormal spread and the last round's stragglers cost it
// what they cost Governor, where the formula's optimum (every call taking
// the median latency) counts neither.

// runReference runs spec's calls straight against a fresh mockllm of
// spec.mock with clients closed-loop clients and returns their makespan.
// Every call must succeed: a reference that failed a call measured
// nothing, and is an error.
func runReference(ctx context.Context, w *workspace, o *options, spec goodputSpec, clients int, log io.Writer) (time.Duration, error) {
	fmt.Fprintf(log, "govbench: %s, reference: %d calls straight to the server, %d in flight\n", spec.title, spec.calls, clients)
	m, err := startMock(ctx, w, spec.name+"-reference-mockllm", spec.mock)
	if err != nil {
		return 0, err
	}
	makespan, err := referenceMakespan(ctx, o, spec, clients, m)
	return makespan, errors.Join(err, m.Stop(stopTimeout))
}

// referenceMakespan drives spec's calls against m.
func referenceMakespan(ctx context.Context, o *options, spec goodputSpec, clients int, m *mock) (time.Duration, error) {
	lc := newLoadClient(clients)
	defer lc.close()
	if err := m.reset(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, runLimit(o, spec.optimum))
	defer cancel()
	results := runCalls(rctx, clients, spec.calls, func(ctx context.Context, i int, buf []byte) callResult {
		return lc.call(ctx, t0, spec.request(m.url, i), buf)
	})
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return referenceOutcome(spec.title, results)
}

// referenceOutcome is the makespan of a reference's calls, or why they
// measured nothing.
func referenceOutcome(title string, results []callResult) (time.Duration, error) {
	var makespan time.Duration
	for i, r := range results {
		if !r.ok() {
			return 0, fmt.Errorf("%s, reference: call %d of %d: status %d: %v", title, i, len(results), r.Status, r.Err)
		}
		makespan = max(makespan, r.End)
	}
	return makespan, nil
}
