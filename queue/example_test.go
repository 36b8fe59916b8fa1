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
		q.Release() // the call in flight finishes; the next one is let out
		fmt.Println(<-granted)
	}
	q.Release()
	wg.Wait()
	// Output:
	// interactive call
	// plain call
	// retried batch item
	// batch item 1
	// batch item 2
}
