package batch

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/proxy"
)

// The async job endpoints, /governor/batches: submit a job, list the
// jobs, follow one, read its results, cancel or forget it.

// serveBatches answers POST /governor/batches (start an async job) and GET
// /governor/batches (list the jobs held; with ?sync=true, also the sync
// batches under way).
func (s *Server) serveBatches(ctx *fasthttp.RequestCtx) {
	if !s.dirReady() {
		s.dirBusy(ctx)
		return
	}
	switch {
	case ctx.IsPost():
		s.createJob(ctx)
	case ctx.IsGet():
		withSync, err := boolQuery(ctx, "sync")
		if err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, proxy.CodeBadRequest, err.Error())
			return
		}
		now := s.cfg.Now()
		out := struct {
			Batches []JobStatus  `json:"batches"`
			Sync    *[]JobStatus `json:"sync,omitempty"`
		}{Batches: []JobStatus{}}
		if withSync {
			live := s.live.statuses(now)
			out.Sync = &live
		}
		for _, j := range s.jobs.list(now) {
			out.Batches = append(out.Batches, j.status(now, s.cfg.TTL))
		}
		reply.WriteJSON(ctx, fasthttp.StatusOK, out)
	default:
		methodNotAllowed(ctx, "GET, POST")
	}
}

func (s *Server) createJob(ctx *fasthttp.RequestCtx) {
	if s.pausing() {
		// A job accepted now would start no item: held in memory, it
		// would end at once with none run; kept on disk, it would wait
		// for the next start. The client asks again, and reaches the
		// Governor that takes over.
		refuseDraining(ctx, "Governor is shutting down and takes no new batch job: submit it again in a moment")
		return
	}
	b, ok := s.parse(ctx)
	if !ok {
		return
	}
	now := s.cfg.Now()
	jctx, cancel := context.WithCancelCause(s.ctx)
	id := newID()
	if b.Options.Tenant == "" {
		b.Options.Tenant = id // a job of its own: it shares lanes fairly with the others
	}
	j := &job{exec: newExecution(id, b, credentials(&ctx.Request.Header)), created: now,
		cancel: cancel, done: make(chan struct{}), held: b.bodyBytes()}
	j.exec.job = true
	j.seen.Store(now.UnixNano())
	// The items outlive this request: their bodies count against the
	// proxy's budget until the job stops running.
	if !s.p.HoldBodies(j.held) {
		cancel(nil)
		e := s.p.BuffersFullError()
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
		writeError(ctx, e.Status, e.Code, e.Message)
		return
	}
	started := false
	defer func() {
		if !started {
			s.p.ReleaseBodies(j.held)
		}
	}()
	// A job starts as it is created; a job resumed after a restart keeps
	// that instant (its header's).
	j.exec.started = now
	err := s.jobs.add(j, now)
	for errors.Is(err, errTooManyJobs) && s.makeRoomForJob() {
		err = s.jobs.add(j, now)
	}
	if err != nil {
		cancel(nil)
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "60")
		writeError(ctx, fasthttp.StatusServiceUnavailable, codeTooManyJobs,
			fmt.Sprintf("%d batch jobs are held (%s): running, or finished with results not yet read; read the results of finished ones (GET %s/{id}/results) or DELETE them, or retry once they expire (%s, %s)",
				s.cfg.MaxJobs, s.cfg.Names.MaxJobs, PathBatches, s.cfg.Names.TTL, s.cfg.TTL))
		return
	}
	if s.dir == nil {
		if s.budget.full() {
			cancel(nil)
			s.jobs.remove(j.exec.id)
			s.resultsFull(ctx)
			return
		}
		j.exec.rows = newMemRows(j.exec.total, s.budget)
	} else {
		if err := s.persist(j, b); err != nil {
			cancel(nil)
			s.jobs.remove(j.exec.id)
			s.cfg.Logger.Error("batch job not stored", "err", err)
			writeError(ctx, fasthttp.StatusInternalServerError, codeStoreError, "the job could not be stored in the batch directory: "+err.Error())
			return
		}
	}
	s.m.batches["async"].Inc()
	s.cfg.Logger.Info("batch job created", "batch", j.exec.id, "items", len(b.Items))
	started = true
	s.run(jctx, j)
	ctx.Response.Header.Set(fasthttp.HeaderLocation, PathBatches+"/"+j.exec.id)
	reply.WriteJSON(ctx, fasthttp.StatusAccepted, j.status(now, s.cfg.TTL))
}

// refuseDraining answers work that comes during a shutdown: 503
// draining, to be sent again in a second (to the Governor that takes
// over).
func refuseDraining(ctx *fasthttp.RequestCtx, msg string) {
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	writeError(ctx, fasthttp.StatusServiceUnavailable, proxy.CodeDraining, msg)
}

// run runs job j in the background.
func (s *Server) run(ctx context.Context, j *job) {
	s.wg.Go(func() {
		defer j.cancel(nil)
		defer s.p.ReleaseBodies(j.held)
		if !s.execute(ctx, j.exec) {
			return // stopped by shutdown: it resumes after a restart
		}
		if j.journal != nil {
			s.finishJournal(j)
		}
		// The items (and the credentials they inherited) are no longer
		// needed; the rows stay until the job expires.
		j.exec.items, j.exec.creds = nil, nil
		close(j.done)
		notify(s.changed) // a job deleted while it ran is done with
		s.finished(j.exec, "async")
	})
}

// serveJob answers /governor/batches/{id}, /governor/batches/{id}/results
// and /governor/batches/{id}/cancel.
func (s *Server) serveJob(ctx *fasthttp.RequestCtx) {
	id, sub, bad := jobPath(ctx)
	if bad != "" {
		writeError(ctx, fasthttp.StatusNotFound, proxy.CodeNotFound, bad)
		return
	}
	if !s.dirReady() {
		s.dirBusy(ctx)
		return
	}
	now := s.cfg.Now()
	j := s.jobs.get(id, now)
	if j == nil {
		early := "" // jobs kept on disk are not forgotten for memory
		if s.dir == nil {
			early = ", or earlier when the answers held in memory reach " + s.cfg.Names.MaxResultBytes
		}
		msg := fmt.Sprintf("no batch job %q (finished jobs expire %s after they finish%s)", id, s.cfg.TTL, early)
		if why, ok := s.lost[id]; ok {
			msg = fmt.Sprintf("batch job %q was lost: %s", id, why)
		}
		writeError(ctx, fasthttp.StatusNotFound, proxy.CodeNotFound, msg)
		return
	}
	j.seen.Store(now.UnixNano())
	switch {
	case sub == "results" && ctx.IsGet():
		s.serveJobResults(ctx, j)
	case sub == "" && ctx.IsGet():
		reply.WriteJSON(ctx, fasthttp.StatusOK, j.status(now, s.cfg.TTL))
	case sub == "" && ctx.IsDelete():
		s.deleteJob(ctx, j)
	case sub == "cancel" && ctx.IsPost():
		s.cancelJob(ctx, j)
	case sub == "results":
		methodNotAllowed(ctx, "GET")
	case sub == "cancel":
		methodNotAllowed(ctx, "POST")
	default:
		methodNotAllowed(ctx, "GET, DELETE")
	}
}

// jobIDs is what a job id may be: those New makes (batch_ and 16 hex
// digits), and any a batch directory holds (package journal's rule).
var jobIDs = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// jobPaths names the endpoints of a job, for the error of a path that is
// none of them.
const jobPaths = "a job's paths are " + PathBatches + "/{id} (GET, DELETE), " +
	PathBatches + "/{id}/results (GET) and " + PathBatches + "/{id}/cancel (POST)"

// jobPath splits the path of a request under PathBatches/ into the job id
// and what follows it ("", "results" or "cancel"), or returns why the path
// names no job endpoint. It reads the path as the client sent it: the
// normalized path drops empty segments (batches//results would name a job
// "results") and decodes %2F.
func jobPath(ctx *fasthttp.RequestCtx) (id, sub, bad string) {
	path := string(ctx.Request.URI().PathOriginal())
	rest, ok := strings.CutPrefix(path, PathBatches+"/")
	if !ok {
		// An absolute-form request line, or dot segments: the
		// normalized path is all there is to go by.
		path = string(ctx.Path())
		rest = strings.TrimPrefix(path, PathBatches+"/")
	}
	id, sub, more := strings.Cut(rest, "/")
	switch {
	case id == "":
		return "", "", fmt.Sprintf("no batch job id in the path %s: %s", clip(path), jobPaths)
	case !jobIDs.MatchString(id):
		return "", "", fmt.Sprintf("%s is not a batch job id (letters, digits, _ and -, as in batch_0123456789abcdef): %s", clip(id), jobPaths)
	case more && sub != "results" && sub != "cancel":
		return "", "", fmt.Sprintf("no batch endpoint %s: %s", clip(path), jobPaths)
	}
	return id, sub, ""
}

// clip quotes s for an error message, cut to 100 bytes.
func clip(s string) string {
	if len(s) > 100 {
		return strconv.Quote(s[:100]) + "..."
	}
	return strconv.Quote(s)
}

func (s *Server) serveJobResults(ctx *fasthttp.RequestCtx, j *job) {
	partial, err := boolQuery(ctx, "partial")
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, proxy.CodeBadRequest, err.Error())
		return
	}
	if !j.finished() && !partial {
		writeError(ctx, fasthttp.StatusConflict, codeRunning,
			"the batch is still running: poll "+PathBatches+"/"+j.exec.id+", or add ?partial=true for the items finished so far")
		return
	}
	var whole func()
	if j.finished() {
		// Every row is recorded: a client that reads this answer to
		// its end has the job's results, so the job may make room.
		whole = func() { j.read.Store(true); notify(s.changed) }
	}
	if rs := s.writeResults(ctx, j.exec, fasthttp.StatusOK, nil); rs != nil {
		rs.onEnd = whole
	}
}

// deleteJob cancels a running job (what has not started becomes
// DID_NOT_RUN, what is in flight is cut) or forgets a finished one.
func (s *Server) deleteJob(ctx *fasthttp.RequestCtx, j *job) {
	if j.finished() {
		s.jobs.remove(j.exec.id)
		reply.WriteJSON(ctx, fasthttp.StatusOK, j.status(s.cfg.Now(), s.cfg.TTL))
		return
	}
	j.mu.Lock()
	j.deleted = true
	j.mu.Unlock()
	s.cancelJob(ctx, j)
}

// cancelJob cancels a running job, as deleteJob does, and answers a
// finished one with its status, leaving it and its results as they are:
// a cancel that arrives once the job has finished (the user asked while
// its last items ended, or sent the cancel again) loses nothing.
func (s *Server) cancelJob(ctx *fasthttp.RequestCtx, j *job) {
	if j.finished() {
		reply.WriteJSON(ctx, fasthttp.StatusOK, j.status(s.cfg.Now(), s.cfg.TTL))
		return
	}
	j.mu.Lock()
	j.cancelled = true
	j.mu.Unlock()
	if j.journal != nil {
		if err := j.journal.Cancel(); err != nil {
			s.cfg.Logger.Error("batch job: cancellation not stored on disk", "batch", j.exec.id, "err", err)
		}
	}
	j.cancel(errCancelled)
	// Items in the queue leave it at once; those in flight are cut.
	// Answer without waiting for them.
	reply.WriteJSON(ctx, fasthttp.StatusAccepted, j.status(s.cfg.Now(), s.cfg.TTL))
}
