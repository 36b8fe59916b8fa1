package batch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgovernor/governor/batch/journal"
	"github.com/llmgovernor/governor/proxy"
)

// Job states, as GET /governor/batches/{id} shows them.
const (
	JobRunning   = "running"
	JobCompleted = "completed"
	JobCancelled = "cancelled"
)

// errTooManyJobs reports a full job store.
var errTooManyJobs = errors.New("too many batch jobs held")

// job is an async batch: it runs in the background and keeps its results
// until they expire.
type job struct {
	exec    *execution
	created time.Time
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when every row is recorded
	// journal keeps the job on disk; nil without a batch directory.
	journal *journal.Job
	// held is what the job's items take of the proxy's budget for
	// request bodies (see proxy.Proxy.HoldBodies), given back when the
	// job stops running.
	held int64

	// read is set once the finished job's results were read to their
	// end: a new job may then take its place before its TTL.
	read atomic.Bool
	// seen is when the job was submitted or a client last asked for its
	// status or results, in Unix nanoseconds.
	seen atomic.Int64

	mu        sync.Mutex
	cancelled bool
	// deleted is set when the job was deleted while it ran (DELETE,
	// not the cancel endpoint, whose client still wants the results).
	deleted bool
}

// JobStatus is a job's progress.
type JobStatus struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Total  int    `json:"total"`
	// Counts has one entry per item status, PENDING included while the
	// job runs.
	Counts     map[string]int `json:"counts"`
	CreatedAt  time.Time      `json:"created_at"`
	StartedAt  *time.Time     `json:"started_at"`
	FinishedAt *time.Time     `json:"finished_at"`
	// ExpiresAt is when a finished job's results are forgotten.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Stopped   string     `json:"stopped,omitempty"`
	// Stalled, while set, says why a running job does not progress: the
	// batch directory does not take its results (a full disk). The job
	// goes on by itself once it does.
	Stalled string `json:"stalled,omitempty"`
}

func (j *job) finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// doneWith reports whether the client is done with a finished job: its
// results were read to their end, or it was deleted while it ran. Such a
// job may be forgotten before its TTL to make room for a new one.
func (j *job) doneWith() bool {
	if !j.finished() {
		return false
	}
	if j.read.Load() {
		return true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.deleted
}

func (j *job) status(now time.Time, ttl time.Duration) JobStatus {
	e := j.exec
	sum := e.snapshotSummary(now)
	e.mu.Lock()
	started, finished, stallErr := e.started, e.finished, e.stallErr
	e.mu.Unlock()
	st := JobStatus{
		ID:        e.id,
		Status:    JobRunning,
		Total:     sum.Total,
		CreatedAt: j.created,
		Stopped:   sum.Stopped,
		Counts: map[string]int{
			"COMPLETED":              sum.Completed,
			"COMPLETED_WITH_RETRIES": sum.CompletedWithRetries,
			"FAILED":                 sum.Failed,
			"DID_NOT_RUN":            sum.DidNotRun,
		},
	}
	if !started.IsZero() {
		st.StartedAt = &started
	}
	if j.finished() {
		st.Status = JobCompleted
		j.mu.Lock()
		if j.cancelled {
			st.Status = JobCancelled
		}
		j.mu.Unlock()
		st.FinishedAt = &finished
		exp := finished.Add(ttl)
		st.ExpiresAt = &exp
	} else {
		if stallErr != "" {
			st.Stalled = "results cannot be written to the batch directory (" + stallErr + "): the job waits, and goes on by itself once they can"
		}
		st.Counts[string(StatusPending)] = sum.Total - sum.Completed - sum.CompletedWithRetries - sum.Failed - sum.DidNotRun
	}
	return st
}

// jobStore holds the async jobs, bounded in number; finished jobs expire
// ttl after they finish. Expiry is lazy: every access first drops what has
// expired, so no timer goroutine is needed. forget, if set, is called for
// each job dropped, without the lock held.
type jobStore struct {
	max    int
	ttl    time.Duration
	forget func(*job)

	mu   sync.Mutex
	byID map[string]*job
}

func newJobStore(max int, ttl time.Duration) *jobStore {
	return &jobStore{max: max, ttl: ttl, byID: map[string]*job{}}
}

// expireLocked drops the jobs that have expired and returns them. It
// requires js.mu to be held.
func (js *jobStore) expireLocked(now time.Time) []*job {
	var gone []*job
	for id, j := range js.byID {
		if !j.finished() {
			continue
		}
		j.exec.mu.Lock()
		fin := j.exec.finished
		j.exec.mu.Unlock()
		if !now.Before(fin.Add(js.ttl)) {
			delete(js.byID, id)
			gone = append(gone, j)
		}
	}
	return gone
}

func (js *jobStore) forgetAll(gone []*job) {
	if js.forget == nil {
		return
	}
	for _, j := range gone {
		js.forget(j)
	}
}

// add stores j, unless max jobs are held already.
func (js *jobStore) add(j *job, now time.Time) error {
	js.mu.Lock()
	gone := js.expireLocked(now)
	full := len(js.byID) >= js.max
	if !full {
		js.byID[j.exec.id] = j
	}
	js.mu.Unlock()
	js.forgetAll(gone)
	if full {
		return errTooManyJobs
	}
	return nil
}

// evictFinished drops the finished job that finished first among those
// evictable reports true for (any finished job if evictable is nil) and
// returns it, nil if there is none. The caller forgets it.
func (js *jobStore) evictFinished(evictable func(*job) bool) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	var oldest *job
	var oldestAt time.Time
	for _, j := range js.byID {
		if !j.finished() || (evictable != nil && !evictable(j)) {
			continue
		}
		j.exec.mu.Lock()
		fin := j.exec.finished
		j.exec.mu.Unlock()
		if oldest == nil || fin.Before(oldestAt) {
			oldest, oldestAt = j, fin
		}
	}
	if oldest != nil {
		delete(js.byID, oldest.exec.id)
	}
	return oldest
}

// expire drops the jobs that have expired.
func (js *jobStore) expire(now time.Time) {
	js.mu.Lock()
	gone := js.expireLocked(now)
	js.mu.Unlock()
	js.forgetAll(gone)
}

// restore stores j, a job found on disk, whatever the bound.
func (js *jobStore) restore(j *job) {
	js.mu.Lock()
	js.byID[j.exec.id] = j
	js.mu.Unlock()
}

func (js *jobStore) get(id string, now time.Time) *job {
	js.mu.Lock()
	gone := js.expireLocked(now)
	j := js.byID[id]
	js.mu.Unlock()
	js.forgetAll(gone)
	return j
}

func (js *jobStore) remove(id string) {
	js.mu.Lock()
	j := js.byID[id]
	delete(js.byID, id)
	js.mu.Unlock()
	if j != nil {
		js.forgetAll([]*job{j})
	}
}

// list returns the jobs, oldest first.
func (js *jobStore) list(now time.Time) []*job {
	js.mu.Lock()
	gone := js.expireLocked(now)
	out := make([]*job, 0, len(js.byID))
	for _, j := range js.byID {
		out = append(out, j)
	}
	js.mu.Unlock()
	js.forgetAll(gone)
	sort.Slice(out, func(a, b int) bool {
		if !out[a].created.Equal(out[b].created) {
			return out[a].created.Before(out[b].created)
		}
		return out[a].exec.id < out[b].exec.id
	})
	return out
}

// counts returns the number of running and finished jobs held.
func (js *jobStore) counts() (running, finished int) {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.byID {
		if j.finished() {
			finished++
		} else {
			running++
		}
	}
	return running, finished
}

// pendingItems returns how many items of the running jobs have not
// finished.
func (js *jobStore) pendingItems() int {
	js.mu.Lock()
	running := make([]*execution, 0, len(js.byID))
	for _, j := range js.byID {
		if !j.finished() {
			running = append(running, j.exec)
		}
	}
	js.mu.Unlock()
	return pendingOf(running)
}

// cancelAll cancels every running job.
func (js *jobStore) cancelAll(cause error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.byID {
		j.cancel(cause)
	}
}

// notRun names the items of e that have not run to their end (DID_NOT_RUN,
// or no row yet), by custom id, else by index, at most max of them and
// then how many more.
func (e *execution) notRun(max int) []string {
	done, _ := e.progress(time.Time{})
	rr, err := e.rows.reader()
	if err != nil {
		return nil
	}
	defer rr.Close()
	var out []string
	more := 0
	for i := range e.total {
		if done[i] {
			r, ok, err := rr.row(i, false)
			if err != nil || !ok || r.Status != proxy.StatusDidNotRun {
				continue
			}
		}
		if len(out) == max {
			more++
			continue
		}
		name := e.customID(i)
		if name == "" {
			name = "#" + strconv.Itoa(i)
		}
		out = append(out, name)
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return out
}

// sweepEvery is how often expired jobs are dropped when nobody asks for
// any: their memory, or their disk, is given back within it.
const sweepEvery = time.Minute

// sweep drops expired jobs every sweepEvery until Shutdown.
func (s *Server) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.paused:
			return
		case <-t.C:
			s.jobs.expire(s.cfg.Now())
		}
	}
}

// forget lets go of a job dropped from the store: its answers held in
// memory, or its folder in the batch directory.
func (s *Server) forget(j *job) {
	defer notify(s.changed)
	if mr, ok := j.exec.rows.(*memRows); ok {
		mr.release()
	}
	if j.journal == nil {
		return
	}
	if err := s.dir.Remove(j.journal); err != nil {
		s.cfg.Logger.Error("batch directory: job not removed", "batch", j.exec.id, "err", err)
	}
}

// evictFinished forgets a finished job to make room for answers: the one
// that finished first among those its client is done with (see
// job.doneWith), else the one that finished first; false if none has
// finished.
func (s *Server) evictFinished() bool {
	j := s.jobs.evictFinished((*job).doneWith)
	if j == nil {
		j = s.jobs.evictFinished(nil)
	}
	if j == nil {
		return false
	}
	s.cfg.Logger.Warn("batch job forgotten before its TTL: answers held in memory reached "+s.cfg.Names.MaxResultBytes,
		"batch", j.exec.id, "max_bytes", s.cfg.MaxResultBytes)
	s.forget(j)
	return true
}

// makeRoomForJob forgets the finished job that finished first among those
// its client is done with (results read to their end, or deleted while it
// ran), to make room for a new job past MaxJobs; false if there is none.
// A job whose results nobody has read is kept until its TTL.
func (s *Server) makeRoomForJob() bool {
	j := s.jobs.evictFinished((*job).doneWith)
	if j == nil {
		return false
	}
	s.cfg.Logger.Info("batch job forgotten before its TTL to make room: its results were read or it was deleted",
		"batch", j.exec.id, "max_jobs", s.cfg.MaxJobs)
	s.forget(j)
	return true
}
