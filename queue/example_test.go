package queue_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/llmgovernor/governor/queue"
)

// Calls wait in order of urgency (RFC 9218 Priority header), retries go
// ahead of fresh calls of their urgency, and first in, first out after that.
func Example() {
	ctx := context.Background()
	q := queue.New(queue.Config{Limit: 1})

	// One call is in flight; the lane allows no more.
	if err := q.Acquire(ctx, queue.Priority{Urgency: queue.DefaultUrgency}); err != nil {
		panic(err)
	}

	calls := []struct {
		name   string
		header string
		retry  bool
	}{
		{"batch item 1", "u=5", false},
		{"batch item 2", "u=5", false},
		{"plain call", "", false},
		{"retried batch item", "u=5", true},
		{"interactive call", "u=0, i", false},
	}
	granted := make(chan string)
	var wg sync.WaitGroup
	for _, c := range calls {
		p := queue.Priority{Urgency: queue.ParsePriority([]byte(c.header)), Retry: c.retry}
		queued := q.Len()
		wg.Go(func() {
			if err := q.Acquire(ctx, p); err != nil {
				panic(err)
			}
			granted <- c.name
		})
		// Let the call join the queue before the next one arrives, so that
		// the arrival order is fixed. (Tests do this with testing/synctest.)
		for q.Len() == queued {
			runtime.Gosched()
		}
	}

	for range calls {
		q.ReleaseTenant("") // the call in flight finishes; the next one is let out
		fmt.Println(<-granted)
	}
	q.ReleaseTenant("")
	wg.Wait()
	// Output:
	// interactive call
	// plain call
	// retried batch item
	// batch item 1
	// batch item 2
}

// Tenants share a lane: within one urgency the slot goes to the tenant
// holding the fewest slots, then to the one served least recently, so a
// job submitted after another is not stuck behind all of its calls: it
// catches up to an equal share, then the two take turns.
func Example_tenants() {
	ctx := context.Background()
	q := queue.New(queue.Config{Limit: 2})

	// job-1 started first and holds both slots.
	for range 2 {
		if !q.TryAcquire(queue.Priority{Urgency: 5, Tenant: "job-1"}) {
			panic("no slot")
		}
	}

	calls := []struct{ name, tenant string }{
		{"job-1 item 3", "job-1"},
		{"job-1 item 4", "job-1"},
		{"job-1 item 5", "job-1"},
		{"job-2 item 1", "job-2"},
		{"job-2 item 2", "job-2"},
		{"job-2 item 3", "job-2"},
	}
	type grant struct{ name, tenant string }
	granted := make(chan grant)
	var wg sync.WaitGroup
	for _, c := range calls {
		queued := q.Len()
		wg.Go(func() {
			if err := q.Acquire(ctx, queue.Priority{Urgency: 5, Tenant: c.tenant}); err != nil {
				panic(err)
			}
			granted <- grant{c.name, c.tenant}
		})
		for q.Len() == queued { // fix the arrival order, as in Example
			runtime.Gosched()
		}
	}
	for _, t := range q.Tenants() {
		fmt.Printf("%s: %d waiting, %d in flight\n", t.Name, t.Waiting, t.InFlight)
	}

	// The oldest call in flight ends each time.
	inFlight := []string{"job-1", "job-1"}
	for range calls {
		q.ReleaseTenant(inFlight[0])
		g := <-granted
		inFlight = append(inFlight[1:], g.tenant)
		fmt.Println(g.name)
	}
	for _, t := range inFlight {
		q.ReleaseTenant(t)
	}
	wg.Wait()
	// Output:
	// job-1: 3 waiting, 2 in flight
	// job-2: 3 waiting, 0 in flight
	// job-2 item 1
	// job-1 item 3
	// job-2 item 2
	// job-1 item 4
	// job-2 item 3
	// job-1 item 5
}
