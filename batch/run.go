package batch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgovernor/governor/proxy"
)

// Why a batch stopped before every item ran; the causes of its context.
var (
	errExitOnError = errors.New("exit_on_error")
	errCancelled   = errors.New("cancelled")
	errShutdown    = errors.New("shutdown")
	errClientGone  = errors.New("client_disconnected")
)

// credentialHeaders are the headers of the batch request that items
// inherit unless they carry their own.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "OpenAI-Organization", "OpenAI-Project"}

// execution is one run of a batch: its rows fill in as items finish.
type execution struct {
	id    string
	batch *Batch
	creds map[string]string // inherited credential headers
	// onRow, if set, is called once per row as it is recorded, from the
	// goroutine that recorded it, without locks held.
	onRow func(i int, r *Row)
	// onRecord, if set, is called like onRow: the access log's hook.
	onRecord func(i int, r *Row)

	mu       sync.Mutex
	rows     []Row
	done     []bool
	summary  Summary
	started  time.Time
	finished time.Time
}

func newExecution(id string, b *Batch, creds map[string]string) *execution {
	return &execution{id: id, batch: b, creds: creds,
		rows: make([]Row, len(b.Items)), done: make([]bool, len(b.Items)),
		summary: Summary{Total: len(b.Items)}}
}

// record stores row i.
func (e *execution) record(i int, r Row) {
	e.mu.Lock()
	e.rows[i] = r
	e.done[i] = true
	e.summary.add(r.Status)
	e.mu.Unlock()
	if e.onRow != nil {
		e.onRow(i, &r)
	}
	if e.onRecord != nil {
		e.onRecord(i, &r)
	}
}

// snapshot returns the rows (unfinished ones PENDING) and the summary.
func (e *execution) snapshot(now time.Time) ([]Row, Summary) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rows := make([]Row, len(e.rows))
	for i := range e.rows {
		if e.done[i] {
			rows[i] = e.rows[i]
		} else {
			rows[i] = Row{Status: StatusPending}
		}
	}
	s := e.summary
	end := e.finished
	if end.IsZero() {
		end = now
	}
	if !e.started.IsZero() {
		s.WallSeconds = round3(end.Sub(e.started).Seconds())
	}
	return rows, s
}

// execute runs every item of e through the proxy's governed round trip, at
// most workers at a time, and records a row for each, DID_NOT_RUN for
// those that never started. It returns when every row is recorded.
//
// Items are claimed in input order by a fixed set of workers, so a batch
// holds at most workers items waiting or in flight: memory grows with
// results, not with waiting work, and the lane's queue orders the batch's
// items among everyone else's calls.
func (s *Server) execute(ctx context.Context, e *execution) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if s.cfg.AccessLog != nil {
		e.onRecord = func(i int, r *Row) { s.logItem(e, i, r) }
	}
	o := &e.batch.Options
	n := len(e.batch.Items)
	workers := min(n, s.cfg.Window)
	if o.Concurrency > 0 {
		workers = min(workers, o.Concurrency)
	}
	e.mu.Lock()
	e.started = s.cfg.Now()
	e.mu.Unlock()

	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				r := s.runItem(ctx, e, i)
				e.record(i, r)
				if o.ExitOnError && r.Status == proxy.StatusFailed {
					stop(errExitOnError)
				}
			}
		})
	}
	wg.Wait()

	for i := range n {
		e.mu.Lock()
		done := e.done[i]
		e.mu.Unlock()
		if !done {
			e.record(i, Row{Status: proxy.StatusDidNotRun})
		}
	}
	e.mu.Lock()
	e.finished = s.cfg.Now()
	if ctx.Err() != nil {
		e.summary.Stopped = stopReason(ctx)
	}
	e.mu.Unlock()
}

// stopReason names why ctx ended.
func stopReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	for _, known := range []error{errExitOnError, errCancelled, errShutdown, errClientGone} {
		if errors.Is(cause, known) {
			return known.Error()
		}
	}
	if proxy.ClientLeft(ctx) {
		return errClientGone.Error()
	}
	return errShutdown.Error()
}

// runItem sends item i and turns its answer into a row.
func (s *Server) runItem(ctx context.Context, e *execution, i int) Row {
	it := &e.batch.Items[i]
	o := &e.batch.Options
	res := s.p.Do(ctx, &proxy.Call{
		Method:         it.Method,
		Path:           it.URL,
		Header:         itemHeader(e.creds, it.Header),
		Body:           it.Body,
		Urgency:        o.Urgency,
		MaxRetries:     o.MaxRetries,
		AttemptTimeout: o.Timeout,
	})
	d := res.Details
	r := Row{Status: d.Status, Attempts: d.Attempts, Errors: d.Errors, Queue: d.Queue, Execution: d.Execution}
	if res.Err != nil {
		if d.Attempts == 0 && ctx.Err() != nil {
			// Stopped while it waited: it never ran.
			return Row{Status: proxy.StatusDidNotRun, Queue: d.Queue}
		}
		r.Status = proxy.StatusFailed
		r.Err = res.Err
		r.Lane = res.Lane
		if d.Attempts == 0 {
			// No attempt to blame: say why it failed all the same.
			r.Errors = append(r.Errors, res.Err.Code+": "+res.Err.Message)
		}
		return r
	}
	r.Lane = res.Lane
	r.StatusCode = res.StatusCode
	r.ContentType = res.ContentType
	r.RequestID = res.RequestID
	r.Body = res.Body
	return r
}

// itemHeader is the header of one item's request: JSON content, the batch
// request's credentials, then the item's own headers, which win.
func itemHeader(creds, own map[string]string) map[string]string {
	h := make(map[string]string, len(creds)+len(own)+1)
	h["Content-Type"] = "application/json"
	for k, v := range creds {
		h[k] = v
	}
	for k, v := range own {
		for existing := range h {
			if strings.EqualFold(existing, k) {
				delete(h, existing)
			}
		}
		h[k] = v
	}
	return h
}
