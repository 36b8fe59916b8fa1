package batch

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
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
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "Anthropic-Version", "OpenAI-Organization", "OpenAI-Project"}

// execute runs every item of e through the proxy's governed round trip, at
// most workers at a time, and records a row for each, DID_NOT_RUN for
// those that never started. It returns when every row is recorded, or,
// for a resumable execution stopped by Governor's shutdown, when the items
// in flight have ended: it then reports false, the run unfinished. An
// async job held in memory that Governor's shutdown stops finishes: the
// items under way end as they would have (or are cut at the drain's end),
// the others are DID_NOT_RUN, and its summary says "shutdown".
//
// Items are claimed in input order by a fixed set of workers, so a batch
// holds at most workers items waiting or in flight: memory grows with
// results, not with waiting work, and the lane's queue orders the batch's
// items among everyone else's calls.
func (s *Server) execute(ctx context.Context, e *execution) (finished bool) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	e.onRecord = func(i int, r *Row) {
		// Counted as each item ends, so that a long batch's progress
		// shows in the metrics while it runs.
		if c := s.m.items[r.Status]; c != nil {
			c.Inc()
		}
		if s.cfg.AccessLog != nil {
			s.logItem(e, i, r)
		}
	}
	o := &e.options
	n := e.total
	workers := min(n, s.cfg.Window)
	if o.Concurrency > 0 {
		workers = min(workers, o.Concurrency)
	}
	e.mu.Lock()
	if e.started.IsZero() {
		e.started = s.cfg.Now()
	}
	e.mu.Unlock()

	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && !(e.job && s.pausing()) {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if e.isDone(i) { // recorded before a restart
					continue
				}
				r, ok := s.runQueued(ctx, e, i)
				if !ok {
					continue // Governor stopped while it waited to be queued: it runs after a restart
				}
				if e.resumable && !r.completed() && (stopped(ctx) || r.drained()) {
					continue // not recorded: it runs again after a restart
				}
				if !s.store(ctx, e, i, r) {
					continue // not recorded: it runs again after a restart
				}
				if o.ExitOnError && r.Status == proxy.StatusFailed {
					stop(errExitOnError)
				}
			}
		})
	}
	wg.Wait()
	paused := e.job && ctx.Err() == nil && s.pausing() && !e.allDone()
	if e.resumable && !e.allDone() && (stopped(ctx) || paused) {
		return false
	}
	why := ""
	switch {
	case ctx.Err() != nil:
		why = stopReason(ctx)
	case paused:
		why = errShutdown.Error()
	}
	e.finish(why, s.cfg.Now())
	return true
}

// pausing reports whether Governor is shutting down: async jobs start no
// more items.
func (s *Server) pausing() bool {
	select {
	case <-s.paused:
		return true
	default:
		return false
	}
}

// stopped reports whether ctx ended because Governor is shutting down.
func stopped(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errShutdown)
}

// stopReason names why ctx ended.
func stopReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	for _, known := range []error{errExitOnError, errCancelled, errShutdown, errClientGone, errStoreFailed} {
		if errors.Is(cause, known) {
			return known.Error()
		}
	}
	if proxy.ClientLeft(ctx) {
		return errClientGone.Error()
	}
	return errShutdown.Error()
}

// Bounds of the wait of an item turned away (a full lane queue, no lane
// to be had) before it asks again; the longest is the Retry-After of a
// queue_full answer.
const (
	roomRetryMin = 50 * time.Millisecond
	roomRetryMax = time.Second
)

// runQueued runs item i like runItem, but an item turned away before it
// was sent (no attempt), by its lane's full queue (queue_full) or for want
// of a lane (too_many_lanes: its credential is new and every lane is in
// use or was used within the last two minutes), is not failed: the batch
// holds it and asks again, after 50 ms and then up to every second, for
// as long as that lasts. A batch thus waits for room, as a client
// honouring the 503's Retry-After would, rather than failing every item
// it has left within milliseconds, and the time waited counts as the
// item's queue time. When Governor starts shutting down
// meanwhile, an async job's item stops waiting: it did not run, and ok is
// false for a resumable job's (it runs after a restart).
func (s *Server) runQueued(ctx context.Context, e *execution, i int) (r Row, ok bool) {
	start := s.cfg.Now()
	r = s.runItem(ctx, e, i)
	wait := roomRetryMin
	for r.turnedAway() {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Row{Status: proxy.StatusDidNotRun, Queue: s.cfg.Now().Sub(start), Lane: r.Lane}, true
		case <-s.pausedIf(e.job):
			t.Stop()
			if e.resumable {
				return Row{}, false
			}
			return Row{Status: proxy.StatusDidNotRun, Queue: s.cfg.Now().Sub(start), Lane: r.Lane}, true
		}
		wait = min(2*wait, roomRetryMax)
		again := s.cfg.Now()
		r = s.runItem(ctx, e, i)
		r.Queue += again.Sub(start)
	}
	return r, true
}

// pausedIf returns a channel closed once Governor shuts down if job, else
// one never closed.
func (s *Server) pausedIf(job bool) <-chan struct{} {
	if job {
		return s.paused
	}
	return nil
}

// turnedAway reports whether the row is that of an item refused before
// any attempt by its lane's full queue or for want of a lane.
func (r *Row) turnedAway() bool {
	return r.Status == proxy.StatusFailed && r.Attempts == 0 && r.Err != nil &&
		(r.Err.Code == proxy.CodeQueueFull || r.Err.Code == proxy.CodeTooManyLanes)
}

// runItem sends item i and turns its answer into a row.
func (s *Server) runItem(ctx context.Context, e *execution, i int) Row {
	it := &e.items[i]
	o := &e.options
	res := s.p.Do(ctx, &proxy.Call{
		Method:           it.Method,
		Path:             it.URL,
		Header:           itemHeader(e.creds, it.Header),
		Body:             it.Body,
		Urgency:          o.Urgency,
		MaxRetries:       o.MaxRetries,
		AttemptTimeout:   o.Timeout,
		Tenant:           o.Tenant,
		MaxResponseBytes: s.cfg.MaxResponseBytes,
		Requeue:          true, // see runQueued
		OnAttempt:        e.sentHook(i),
	})
	d := res.Details
	r := Row{Status: d.Status, Attempts: d.Attempts, Errors: d.Errors, Queue: d.Queue, Execution: d.Execution}
	if ctx.Err() != nil && d.Status != proxy.StatusCompleted && d.Status != proxy.StatusCompletedWithRetries {
		// The batch stopped before the item finished: in the queue,
		// waiting for a retry, or cut in flight. An earlier attempt's
		// answer (a 429 it was to retry) is not its outcome.
		return Row{Status: proxy.StatusDidNotRun, Attempts: d.Attempts, Errors: d.Errors,
			Queue: d.Queue, Execution: d.Execution, Lane: res.Lane}
	}
	if res.Err != nil && res.Err.Code == proxy.CodeDraining {
		// Governor's drain ended before the item did: it did not run
		// to its end, and its error says so.
		return Row{Status: proxy.StatusDidNotRun, Attempts: d.Attempts, Errors: d.Errors,
			Queue: d.Queue, Execution: d.Execution, Lane: res.Lane, Err: res.Err}
	}
	if res.Err != nil {
		r.Status = proxy.StatusFailed
		r.Err = res.Err
		r.Lane = res.Lane
		r.HeadStatus = d.StatusCode
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
	if r.StatusCode >= 300 && r.StatusCode < 400 {
		// Governor follows no redirect (the item's credentials would go
		// to another host), so a 3xx answers nothing the item asked: it
		// failed, as a 4xx does, with the redirect kept as its answer.
		r.Status = proxy.StatusFailed
		r.Errors = append(r.Errors, redirectError(r.StatusCode, res.Location))
	}
	return r
}

// redirectError is the error of an item answered with redirect status,
// naming where it redirected (see redirectTarget).
func redirectError(status int, location string) string {
	s := strconv.Itoa(status) + " " + http.StatusText(status)
	if to := redirectTarget(location); to != "" {
		s += " to " + to
	}
	return s + ": redirects are not followed"
}

// maxTargetLen bounds the redirect target an item's error names.
const maxTargetLen = 200

// redirectTarget is a Location header fit to show in an item's error:
// without its userinfo, query and fragment, which may carry a credential
// (https://user:key@host/, ?key=…, #access_token=…), "?…" standing for a
// query dropped, and cut to maxTargetLen bytes; empty when there is none.
func redirectTarget(location string) string {
	if location == "" {
		return ""
	}
	u, err := url.Parse(location)
	if err != nil {
		return "(a Location that is not a URL)"
	}
	dropped := u.RawQuery != "" || u.ForceQuery
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	s := u.String()
	if dropped {
		s += "?…"
	}
	if len(s) > maxTargetLen {
		s = strings.ToValidUTF8(s[:maxTargetLen], "") + "…"
	}
	return s
}

// sentHook returns what records, in e's journal, each attempt of item i
// before it is sent, so that a restart counts it (see withPrior); nil
// for an execution without one.
func (e *execution) sentHook(i int) func(int) {
	d, ok := e.rows.(*diskRows)
	if !ok {
		return nil
	}
	// A write the disk refuses only leaves the attempt uncounted, should
	// the process stop before the item's row is recorded.
	return func(int) { _ = d.j.Sent(i) }
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
