package batch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/batch/journal"
	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/proxy"
)

// Config configures a Server. The zero value of every field but Metrics is
// a documented default.
type Config struct {
	// MaxItems bounds the requests of one batch. Default 50000.
	MaxItems int
	// Window bounds the items of one batch waiting in a queue or in flight
	// at once. Default 128.
	Window int
	// MaxJobs bounds the async jobs held, running or finished: a new job
	// beyond it makes room by forgetting the finished job that finished
	// first among those whose results were read to their end or that were
	// deleted while running; if there is none it gets 503
	// too_many_batches. A job whose results nobody read is kept until its
	// TTL.
	// Default 100.
	MaxJobs int
	// TTL is how long a finished async job's results are kept. Default 1h.
	TTL time.Duration
	// MaxResultBytes bounds the answer bytes that batches keep in memory,
	// all together: async jobs without a batch directory, and sync batches
	// answered with a document (JSON or JSONL, not progress lines) until
	// it is written. Beyond it, finished jobs are forgotten early (without
	// a batch directory), those whose results were read or that were
	// deleted first, each kind in the order they finished; if running batches
	// alone fill it, a new answer is dropped (its item FAILED with
	// results_memory_full) and new batches get 503. Default 256 MiB.
	MaxResultBytes int64
	// Dir, if set, is the batch directory: async jobs are kept there (see
	// package journal), resume after a restart, and their results are
	// read back from disk rather than held in memory. Empty: memory only.
	Dir string
	// MaxResponseBytes bounds one item's answer, read whole and kept; a
	// larger one fails its item (FAILED, 502 upstream_bad_response, an
	// error that gives the limit). Default 8 MiB.
	MaxResponseBytes int
	// WriteIdle bounds how long a client may leave a progress line or an
	// answer unread before it is given up. Default 5m.
	WriteIdle time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Metrics receives the batch metrics. Required; owned by the caller.
	Metrics *metrics.Set
	// Logger receives operational logs. Default: discard.
	Logger *slog.Logger
	// AccessLog, if set, receives one line per batch item, at Info level,
	// once its row is recorded: message "batch item", with batch (the
	// batch's id), item (its index), method, path (without the query),
	// lane, code (the provider's status, or Governor's error's), status,
	// attempts, queue_ms, upstream_ms, bytes_in, bytes_out (the answer's
	// body) and request_id (the provider's, else the item's X-Request-Id).
	// Nil: no access log.
	AccessLog *slog.Logger
	// Names are what the batch API's errors and logs call the settings
	// an operator may change when they refuse a batch or drop an answer.
	// Empty ones are the fields' own names ("Config.MaxJobs"); a program
	// configured otherwise (environment variables) gives the names its
	// users set.
	Names Names
}

// Names are the names of Config's settings in what the batch API writes
// to its clients and its logs; see Config.Names.
type Names struct {
	MaxJobs, TTL, MaxResultBytes, Dir string
}

func (n *Names) withDefaults() {
	setName(&n.MaxJobs, "Config.MaxJobs")
	setName(&n.TTL, "Config.TTL")
	setName(&n.MaxResultBytes, "Config.MaxResultBytes")
	setName(&n.Dir, "Config.Dir")
}

func setName(n *string, def string) {
	if *n == "" {
		*n = def
	}
}

// Defaults of the Config fields.
const (
	DefaultMaxItems  = 50000
	DefaultWindow    = 128
	DefaultMaxJobs   = 100
	DefaultTTL       = time.Hour
	DefaultWriteIdle = 5 * time.Minute
	// DefaultMaxResultBytes is Config.MaxResultBytes' default: 256 MiB.
	DefaultMaxResultBytes = 256 << 20
	// DefaultMaxResponseBytes is Config.MaxResponseBytes' default: 8 MiB.
	DefaultMaxResponseBytes = 8 << 20
)

// Server serves Governor's batch API on a proxy's main listener.
type Server struct {
	p      *proxy.Proxy
	cfg    Config
	parser parser
	jobs   *jobStore
	live   *liveBatches // sync batches under way
	m      *serverMetrics
	// dir is the batch directory, nil without Config.Dir; set before
	// dirOpen is closed.
	dir    *journal.Dir
	budget *resultBudget // answers held in memory by async jobs, without dir
	// dirOpen is closed once the batch directory is open and its jobs
	// loaded (at once without one). Until then another process holds
	// it, and the async job endpoints answer 503 (see dirBusy).
	dirOpen chan struct{}
	// lost says why each job found damaged at start-up could not be kept;
	// written before dirOpen is closed, read-only afterwards.
	lost map[string]string

	// ctx ends when async jobs are to stop at once: at Shutdown without
	// a batch directory, at the end of its ctx with one.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// paused is closed at Pause or Shutdown: async jobs start no more
	// items.
	paused chan struct{}
	pause  func()
	// pausedAt is when pause first ran, in Unix nanoseconds.
	pausedAt atomic.Int64
	// changed is signalled (capacity 1) when a job held in memory may
	// have become one its client is done with (see AwaitRead).
	changed chan struct{}
	// closeDir lets the batch directory go, once.
	closeDir func() error
	wg       sync.WaitGroup // background runs: async jobs and progress streams
}

// Paths of the batch API.
const (
	PathBatch   = proxy.APIPrefix + "batch"
	PathBatches = proxy.APIPrefix + "batches"
)

// New returns a Server that runs batches through p, and registers its
// endpoints on p. With Config.Dir, it locks the directory, lists its
// finished jobs again and resumes the unfinished ones; damage it finds
// there is logged, not fatal. If another process holds the directory (an
// old Governor still draining on the same volume), New does not fail: the
// async job endpoints answer 503 batch_directory_busy, sync batches run,
// and the directory is taken and its jobs resumed as soon as it is let
// go. A directory that cannot be opened at all is an error.
func New(p *proxy.Proxy, cfg Config) (*Server, error) {
	if cfg.Metrics == nil {
		return nil, errors.New("batch: no metrics set")
	}
	setDefault(&cfg.MaxItems, DefaultMaxItems)
	setDefault(&cfg.Window, DefaultWindow)
	setDefault(&cfg.MaxJobs, DefaultMaxJobs)
	setDefault(&cfg.TTL, DefaultTTL)
	setDefault(&cfg.WriteIdle, DefaultWriteIdle)
	setDefault(&cfg.MaxResultBytes, DefaultMaxResultBytes)
	setDefault(&cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	cfg.Names.withDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		p:      p,
		cfg:    cfg,
		parser: parser{maxItems: cfg.MaxItems, checkPath: p.ValidatePath},
		jobs:   newJobStore(cfg.MaxJobs, cfg.TTL),
		live:   newLiveBatches(),
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.paused = make(chan struct{})
	s.pause = sync.OnceFunc(func() {
		s.pausedAt.Store(s.cfg.Now().UnixNano())
		close(s.paused)
	})
	s.changed = make(chan struct{}, 1)
	s.closeDir = sync.OnceValue(func() error {
		if s.dir == nil {
			return nil
		}
		return s.dir.Close()
	})
	s.dirOpen = make(chan struct{})
	var busy error // the directory is locked by another process
	if cfg.Dir != "" {
		dir, err := journal.Open(cfg.Dir)
		switch {
		case errors.Is(err, journal.ErrLocked):
			busy = err
		case err != nil:
			return nil, err // it names the batch directory
		}
		s.dir = dir
		// Finished jobs are on disk: forgetting one frees no memory.
		s.budget = &resultBudget{max: cfg.MaxResultBytes, names: cfg.Names, evict: func() bool { return false }}
	} else {
		s.budget = &resultBudget{max: cfg.MaxResultBytes, names: cfg.Names, evict: s.evictFinished}
	}
	s.jobs.forget = s.forget
	s.m = newServerMetrics(cfg.Metrics, s.jobs, s.live, s.budget)
	p.HandleAPI(PathBatch, s.serveBatch)
	p.HandleAPI(PathBatches, s.serveBatches)
	p.HandleAPI(PathBatches+"/", s.serveJob)
	switch {
	case busy != nil:
		cfg.Logger.Warn("batch directory in use by another process: async jobs are served once it lets it go; sync batches run meanwhile",
			"err", busy)
		s.wg.Go(s.awaitDir)
	case s.dir != nil:
		s.restore()
		close(s.dirOpen)
	default:
		close(s.dirOpen)
	}
	s.wg.Go(s.sweep)
	return s, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// followedWithin is how recently before a shutdown a client must have
// submitted a job or asked for its status or results for the shutdown to
// wait for it to read them (see Pause).
const followedWithin = time.Minute

// Pause begins a shutdown: async jobs start no more items, and a new
// job or sync batch gets 503 draining. It returns how many jobs held in
// memory (without a batch directory) have results a client is still
// following: not done with (running, or finished and neither read to
// their end nor deleted), and submitted or asked about within
// followedWithin before the first Pause. Those results go with the
// process at Shutdown. A job nobody asked about lately is not counted:
// its client is gone, and waiting for it would only hold the shutdown.
func (s *Server) Pause() (unread int) {
	s.pause()
	return s.unread()
}

// unread counts the jobs held in memory whose clients follow them and are
// not done with them (see Pause); with a batch directory, none.
func (s *Server) unread() int {
	if s.dir != nil {
		return 0
	}
	since := s.pausedAt.Load() - int64(followedWithin)
	n := 0
	for _, j := range s.jobs.list(s.cfg.Now()) {
		if j.seen.Load() >= since && !j.doneWith() {
			n++
		}
	}
	return n
}

// AwaitRead pauses the async jobs (see Pause) and waits until no job held
// in memory has results a client follows and is not done with (see
// Pause), or ctx ends. The
// items in flight finish meanwhile. Called in a drain while the proxy
// still serves Governor's API, it lets clients fetch the results that
// would otherwise go with the process (or delete the jobs) before
// Shutdown; with a batch directory it returns at once. It returns ctx's
// error if ctx ended first.
func (s *Server) AwaitRead(ctx context.Context) error {
	s.pause()
	for s.unread() > 0 {
		select {
		case <-s.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Shutdown stops the async jobs and waits for every background run,
// progress streams included, to end or ctx to be done. Jobs start no more
// items; the items already started get until ctx is done to finish, and
// those still unfinished then are cut. With a batch directory, what was
// recorded stays there and what was not (items never started, or cut)
// runs when a Governor opens the directory again. Without one, each job
// finishes: the items that never started, or were cut, are DID_NOT_RUN,
// its summary says "shutdown", and since its results go with the process,
// every job whose results were not read to their end is logged (a
// warning, "batch job results lost at shutdown", with its counts and the
// items that did not run). Sync batches are calls of the proxy's clients:
// the proxy's own Shutdown waits for them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.pause()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.stopJobs()
	if err != nil {
		// The runs cut now record their rows at once: give them a
		// moment, so that the report below sees the jobs' ends.
		t := time.NewTimer(stopGrace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	s.reportLost()
	if err == nil {
		return s.closeDir()
	}
	return err
}

// stopGrace is how long Shutdown, once its ctx has ended, waits for the
// runs it cuts to record their last rows.
const stopGrace = time.Second

// stopJobs cuts every async job where it is.
func (s *Server) stopJobs() {
	s.cancel(errShutdown)
	s.jobs.cancelAll(errShutdown)
}

// maxLostItems bounds the items a lost job's log line names.
const maxLostItems = 20

// reportLost logs, at shutdown, every job held in memory whose client is
// not done with it (results read to their end, or deleted while it ran):
// its results go with the process.
func (s *Server) reportLost() {
	if s.dir != nil {
		return
	}
	for _, j := range s.jobs.list(s.cfg.Now()) {
		if j.doneWith() {
			continue
		}
		st := j.status(s.cfg.Now(), s.cfg.TTL)
		attrs := []any{"batch", st.ID, "status", st.Status, "stopped", st.Stopped, "items", st.Total,
			"completed", st.Counts["COMPLETED"], "completed_with_retries", st.Counts["COMPLETED_WITH_RETRIES"],
			"failed", st.Counts["FAILED"], "did_not_run", st.Counts["DID_NOT_RUN"]}
		if n := st.Counts[string(StatusPending)]; n > 0 {
			attrs = append(attrs, "pending", n)
		}
		if ids := j.exec.notRun(maxLostItems); len(ids) > 0 {
			attrs = append(attrs, "not_run", ids)
		}
		s.cfg.Logger.Warn("batch job results lost at shutdown: kept in memory only, and not read to their end (set "+s.cfg.Names.Dir+" to keep jobs across restarts)", attrs...)
	}
}

// serveBatch answers POST /governor/batch: it runs the batch and answers
// when it is done, or streams progress lines as items finish.
func (s *Server) serveBatch(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		methodNotAllowed(ctx, "POST")
		return
	}
	if s.pausing() {
		refuseDraining(ctx, "Governor is shutting down and takes no new batch: send it again in a moment")
		return
	}
	b, ok := s.parse(ctx)
	if !ok {
		return
	}
	e := newExecution(newID(), b, credentials(&ctx.Request.Header))
	if wantsProgress(ctx.Request.Header.Peek(fasthttp.HeaderAccept)) {
		s.streamProgress(ctx, e)
		return
	}
	// The answers are held until the document is written: they count
	// against the same bound as async jobs' answers.
	if s.budget.full() {
		s.resultsFull(ctx)
		return
	}
	rows := newMemRows(e.total, s.budget)
	e.rows = rows
	s.m.batches["sync"].Inc()
	cctx, stop := s.p.ClientContext(ctx)
	unlist := s.live.add(e, s.cfg.Now())
	s.execute(cctx, e)
	unlist()
	stop()
	s.finished(e, "sync")
	s.writeResults(ctx, e, fasthttp.StatusOK, rows.release)
}

// resultsFull answers 503 results_memory_full: running batches hold as
// many answer bytes in memory as MaxResultBytes allows.
func (s *Server) resultsFull(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "60")
	writeError(ctx, fasthttp.StatusServiceUnavailable, codeResultsFull,
		fmt.Sprintf("running batches hold %d bytes of answers in memory, the most allowed (%s): wait for them to finish, ask for progress lines (Accept: application/x-ndjson), which keep none, or set %s to keep async jobs' results on disk",
			s.cfg.MaxResultBytes, s.cfg.Names.MaxResultBytes, s.cfg.Names.Dir))
}

// streamProgress answers with one NDJSON line per item as it finishes,
// then a summary line. The batch runs in the background; the client
// leaving cancels it. Rows are sent, not kept, and a client that reads
// slowly holds back the batch (see lineStream).
func (s *Server) streamProgress(ctx *fasthttp.RequestCtx, e *execution) {
	s.m.batches["progress"].Inc()
	cctx, stopWatch := s.p.ClientContext(ctx)
	runCtx, cancel := context.WithCancelCause(cctx)
	ls := newLineStream(ctx.Conn(), s.cfg.WriteIdle, runCtx.Done(), func() { cancel(errClientGone) })
	fallback := e.options.Fallback
	e.rows = sentRows{} // each row is sent as it is recorded
	e.onRow = func(i int, r *Row) {
		line, _ := json.Marshal(progressLine{Index: i, CustomID: e.customID(i),
			Output: r.output(fallback), Detail: r.detail()})
		ls.push(line)
	}
	unlist := s.live.add(e, s.cfg.Now())
	s.wg.Go(func() {
		defer stopWatch()
		defer cancel(nil)
		s.execute(runCtx, e)
		unlist()
		// Before the stream ends: fasthttp may then read the client's
		// next request, which a peek at the client would wait behind.
		stopWatch()
		line, _ := json.Marshal(summaryLine{Summary: e.snapshotSummary(s.cfg.Now())})
		ls.push(line)
		ls.end()
		s.finished(e, "progress")
	})
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.ImmediateHeaderFlush = true
	ctx.Response.SetBodyStream(ls, -1)
}

// Codes of the batch API's own errors.
const (
	codeTooManyJobs = "too_many_batches"
	codeRunning     = "batch_running"
	codeBadBatch    = "invalid_batch"
	codeMediaType   = "unsupported_media_type"
	codeStoreError  = "batch_store_error"
)

// writeResults answers with a batch's results in its format: the JSON
// document, or OpenAI Batch output lines, streamed a row at a time. done,
// if set, is called once the answer is written or given up. It returns
// the answer's body, which fasthttp reads after the handler returns; nil
// if the results could not be read (answered with an error).
func (s *Server) writeResults(ctx *fasthttp.RequestCtx, e *execution, status int, done func()) *resultsStream {
	rs, err := newResultsStream(e, s.cfg.Now(), ctx.Conn(), s.cfg.WriteIdle)
	if err == nil {
		rs.onClose = done
	} else if done != nil {
		done()
	}
	if err != nil {
		s.cfg.Logger.Error("batch results unreadable", "batch", e.id, "err", err)
		writeError(ctx, fasthttp.StatusInternalServerError, codeStoreError, err.Error())
		return nil
	}
	if e.format == FormatJSONL {
		ctx.SetContentType("application/jsonl")
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.Response.Header.Set("X-Governor-Batch-Id", e.id)
	// A large answer is written after the handler returns: bound that write.
	_ = ctx.Conn().SetWriteDeadline(time.Now().Add(s.cfg.WriteIdle))
	ctx.SetStatusCode(status)
	ctx.SetBodyStream(rs, -1)
	return rs
}

// finished accounts for a batch that has run.
func (s *Server) finished(e *execution, mode string) {
	sum := e.snapshotSummary(s.cfg.Now())
	s.cfg.Logger.Info("batch finished", "batch", e.id, "mode", mode, "items", sum.Total,
		"completed", sum.Completed, "completed_with_retries", sum.CompletedWithRetries,
		"failed", sum.Failed, "did_not_run", sum.DidNotRun, "wall_seconds", sum.WallSeconds, "stopped", sum.Stopped)
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set(fasthttp.HeaderAllow, allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, proxy.CodeMethodNotAllowed, "use "+allow)
}

// newID returns a fresh batch id.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "batch_" + hex.EncodeToString(b[:])
}

// writeError answers ctx with Governor's error in OpenAI's shape, which
// the batch API speaks whatever the route of its items.
func writeError(ctx *fasthttp.RequestCtx, status int, code, message string) {
	reply.WriteError(ctx, false, reply.Error{Status: status, Code: code, Message: message})
}
