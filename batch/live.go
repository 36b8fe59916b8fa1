package batch

import (
	"sort"
	"sync"
	"time"
)

// liveBatches are the sync batches and progress streams under way, shown
// by GET /governor/batches beside the jobs so that a long sync batch can
// be watched. They are held only while they run: their client has the
// results.
type liveBatches struct {
	mu   sync.Mutex
	byID map[string]*job
}

func newLiveBatches() *liveBatches {
	return &liveBatches{byID: map[string]*job{}}
}

// add shows e from now until the returned function is called.
func (lb *liveBatches) add(e *execution, now time.Time) (remove func()) {
	j := &job{exec: e, created: now, done: make(chan struct{})}
	lb.mu.Lock()
	lb.byID[e.id] = j
	lb.mu.Unlock()
	return func() {
		lb.mu.Lock()
		delete(lb.byID, e.id)
		lb.mu.Unlock()
	}
}

// statuses returns the progress of each batch under way, oldest first.
func (lb *liveBatches) statuses(now time.Time) []JobStatus {
	lb.mu.Lock()
	js := make([]*job, 0, len(lb.byID))
	for _, j := range lb.byID {
		js = append(js, j)
	}
	lb.mu.Unlock()
	sort.Slice(js, func(a, b int) bool {
		if !js[a].created.Equal(js[b].created) {
			return js[a].created.Before(js[b].created)
		}
		return js[a].exec.id < js[b].exec.id
	})
	out := make([]JobStatus, 0, len(js))
	for _, j := range js {
		out = append(out, j.status(now, 0))
	}
	return out
}

// pendingItems returns how many items of the batches under way have not
// finished.
func (lb *liveBatches) pendingItems() int {
	lb.mu.Lock()
	es := make([]*execution, 0, len(lb.byID))
	for _, j := range lb.byID {
		es = append(es, j.exec)
	}
	lb.mu.Unlock()
	return pendingOf(es)
}
