package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/batch/journal"
	"github.com/llmgovernor/governor/proxy"
)

// What an async job keeps in its batch directory (package journal frames
// and checksums each piece).

// jobHeader is what listing a job needs.
type jobHeader struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Format  Format    `json:"format"`
	Options Options   `json:"options"`
}

// jobEnd is the payload of a finished job's last record.
type jobEnd struct {
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	Stopped   string    `json:"stopped,omitempty"`
	Cancelled bool      `json:"cancelled,omitempty"`
}

// rowMeta is a row without its body.
type rowMeta struct {
	CustomID    string       `json:"custom_id,omitempty"`
	Status      proxy.Status `json:"status"`
	Attempts    int          `json:"attempts"`
	Before      int          `json:"attempts_before_restart,omitempty"`
	Errors      []string     `json:"errors,omitempty"`
	Queue       int64        `json:"queue_ns"`
	Execution   int64        `json:"execution_ns"`
	StatusCode  int          `json:"status_code,omitempty"`
	ContentType string       `json:"content_type,omitempty"`
	RequestID   string       `json:"request_id,omitempty"`
	Err         *proxy.Error `json:"err,omitempty"`
	Lane        string       `json:"lane,omitempty"`
	HeadStatus  int          `json:"head_status,omitempty"`
}

func metaOf(r *Row, customID string) rowMeta {
	return rowMeta{CustomID: customID, Status: r.Status, Attempts: r.Attempts, Before: r.AttemptsBeforeRestart, Errors: r.Errors,
		Queue: int64(r.Queue), Execution: int64(r.Execution), StatusCode: r.StatusCode,
		ContentType: r.ContentType, RequestID: r.RequestID, Err: r.Err, Lane: r.Lane, HeadStatus: r.HeadStatus}
}

func (m *rowMeta) row() Row {
	return Row{Status: m.Status, Attempts: m.Attempts, AttemptsBeforeRestart: m.Before, Errors: m.Errors,
		Queue: time.Duration(m.Queue), Execution: time.Duration(m.Execution), StatusCode: m.StatusCode,
		ContentType: m.ContentType, RequestID: m.RequestID, Err: m.Err, Lane: m.Lane, HeadStatus: m.HeadStatus}
}

// diskRows keeps an execution's rows in its journal; rows that could not
// be written are kept in memory instead.
type diskRows struct {
	j         *journal.Job
	customIDs func(i int) string
	fallback  *memRows
}

func newDiskRows(j *journal.Job, e *execution) *diskRows {
	return &diskRows{j: j, customIDs: e.customID, fallback: newMemRows(j.Total(), nil)}
}

func (d *diskRows) put(i int, r *Row) error {
	if err := d.write(i, r); err != nil {
		_ = d.fallback.put(i, r)
		return fmt.Errorf("item %d kept in memory: %w", i, err)
	}
	return nil
}

// putLater is put without waiting for the disk (see laterRows).
func (d *diskRows) putLater(i int, r *Row) error {
	meta, err := json.Marshal(metaOf(r, d.customIDs(i)))
	if err == nil {
		err = d.j.PutAsync(i, meta, r.Body)
	}
	if err != nil {
		_ = d.fallback.put(i, r)
		return fmt.Errorf("item %d kept in memory: %w", i, err)
	}
	return nil
}

// write records row i in the journal, with no fallback.
func (d *diskRows) write(i int, r *Row) error {
	meta, err := json.Marshal(metaOf(r, d.customIDs(i)))
	if err != nil {
		return err
	}
	return d.j.Put(i, meta, r.Body)
}

// Bounds of the wait between two tries to write a row the batch directory
// refused.
const (
	storeRetryMin = 100 * time.Millisecond
	storeRetryMax = 5 * time.Second
)

// store records row i of e. A row of a job kept in the batch directory
// that the directory refuses for now (a full disk, a file size limit) is
// not given up: the worker waits and tries again, with growing pauses up
// to storeRetryMax, and the job's status says it is stalled. The job thus
// pauses rather than stops: its other items in flight end and wait the
// same way, no more start, and it goes on by itself once the directory
// takes rows again (an expired or deleted job gave its room back, the
// volume grew); at most a window of answers waits in memory meanwhile.
//
// store reports false when Governor starts shutting down during the wait:
// the row is not recorded, and the item runs again after a restart. When
// ctx ends otherwise (the job was cancelled), or the journal cannot be
// written at all any more, the row is kept in memory as record does.
func (s *Server) store(ctx context.Context, e *execution, i int, r Row) bool {
	e.withPrior(i, &r)
	d, ok := e.rows.(*diskRows)
	if !ok {
		e.record(i, r)
		return true
	}
	wait := storeRetryMin
	waiting := false
	defer func() {
		if waiting {
			s.unstall(e)
		}
	}()
	for {
		err := d.write(i, &r)
		var we *journal.WriteError
		switch {
		case err == nil:
			e.recorded(i, r)
			return true
		case !errors.As(err, &we):
			e.record(i, r)
			return true
		case !waiting:
			waiting = true
			s.stall(e, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			wait = min(2*wait, storeRetryMax)
		case <-s.paused:
			t.Stop()
			return false
		case <-ctx.Done():
			t.Stop()
			if stopped(ctx) {
				return false
			}
			e.record(i, r)
			return true
		}
	}
}

// stall counts a row of e that waits for the batch directory; the first
// one logs why.
func (s *Server) stall(e *execution, err error) {
	e.mu.Lock()
	e.stalled++
	first := e.stalled == 1
	if first {
		e.stallErr = err.Error()
	}
	e.mu.Unlock()
	if first {
		s.cfg.Logger.Error("batch job stalled: the batch directory does not take its results; it waits and goes on once they are written",
			"batch", e.id, "err", err)
	}
}

// unstall ends the wait of one row of e; the last one logs.
func (s *Server) unstall(e *execution) {
	e.mu.Lock()
	e.stalled--
	last := e.stalled == 0
	if last {
		e.stallErr = ""
	}
	e.mu.Unlock()
	if last {
		s.cfg.Logger.Info("batch job no longer stalled", "batch", e.id)
	}
}

func (d *diskRows) reader() (rowReader, error) {
	jr, err := d.j.Open()
	if err != nil {
		return nil, err
	}
	return &diskReader{jr: jr, fallback: d.fallback}, nil
}

type diskReader struct {
	jr       *journal.Reader
	fallback *memRows
}

func (d *diskReader) row(i int, body bool) (Row, bool, error) {
	var meta, b []byte
	var ok bool
	var err error
	if body {
		meta, b, ok, err = d.jr.Get(i)
	} else {
		meta, ok, err = d.jr.Meta(i)
	}
	if err != nil || !ok {
		if r, ok, _ := d.fallback.row(i, body); ok {
			return r, true, nil
		}
		return Row{}, false, err
	}
	var m rowMeta
	if err := json.Unmarshal(meta, &m); err != nil {
		return Row{}, false, fmt.Errorf("item %d: %w", i, err)
	}
	r := m.row()
	r.Body = b
	return r, true, nil
}

func (d *diskReader) Close() error { return d.jr.Close() }

// persist writes a new job to the batch directory and moves its rows
// there.
func (s *Server) persist(j *job, b *Batch) error {
	e := j.exec
	header, err := json.Marshal(jobHeader{ID: e.id, Created: j.created, Format: e.format, Options: e.options})
	if err != nil {
		return err
	}
	// The items' own headers may carry credentials: they go with the
	// request's into the secret, which the journal removes when the job
	// finishes, not into the input, which stays until the job expires.
	items := slices.Clone(b.Items)
	sec := jobSecret{Creds: e.creds}
	for i := range items {
		if len(items[i].Header) > 0 {
			if sec.ItemHeaders == nil {
				sec.ItemHeaders = map[int]map[string]string{}
			}
			sec.ItemHeaders[i] = items[i].Header
			items[i].Header = nil
		}
	}
	input, err := json.Marshal(items)
	if err != nil {
		return err
	}
	secret, err := json.Marshal(sec)
	if err != nil {
		return err
	}
	jj, err := s.dir.Create(e.id, e.total, header, input, secret)
	if err != nil {
		return err
	}
	s.attach(j, jj)
	return nil
}

// attach makes j keep its rows in jj.
func (s *Server) attach(j *job, jj *journal.Job) {
	j.journal = jj
	j.exec.rows = newDiskRows(jj, j.exec)
	j.exec.resumable = true
	id := j.exec.id
	var once sync.Once // the rest would say the same
	j.exec.onStoreError = func(err error) {
		once.Do(func() {
			s.cfg.Logger.Error("batch job: result not stored on disk; the job stops", "batch", id, "err", err)
		})
		j.cancel(errStoreFailed)
	}
}

// errStoreFailed stops a job whose results can no longer be written.
var errStoreFailed = errors.New("store_error")

// jobSecret is what a job's secret file holds: the credentials its items
// inherit from the request, and the items' own headers, by index.
type jobSecret struct {
	Creds       map[string]string         `json:"creds"`
	ItemHeaders map[int]map[string]string `json:"item_headers,omitempty"`
}

// decodeSecret reads a job's secret file: a jobSecret, or the inherited
// credentials alone (a flat map of headers, the items' headers then being
// in the input).
func decodeSecret(b []byte) (jobSecret, error) {
	var sec jobSecret
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&sec) == nil {
		return sec, nil
	}
	var creds map[string]string
	if err := json.Unmarshal(b, &creds); err != nil {
		return jobSecret{}, err
	}
	return jobSecret{Creds: creds}, nil
}

// restore loads the jobs of the batch directory: finished ones are listed
// again, unfinished ones resume (cancelled ones finish at once).
func (s *Server) restore() {
	// One job's results at a time: a directory of many large jobs would
	// otherwise hold all their metas at once.
	damage := s.dir.LoadEach(func(l journal.Loaded) {
		if err := s.restoreJob(l); err != nil {
			l.Job.Close()
			s.cfg.Logger.Error("batch directory: job unreadable, left on disk", "batch", l.Job.ID(), "err", err)
		}
	})
	for _, d := range damage {
		if d.Lost {
			if s.lost == nil {
				s.lost = map[string]string{}
			}
			s.lost[d.ID] = fmt.Sprintf("its files were damaged when Governor started (%v); what was left is in the batch directory's damaged/ folder", d.Err)
			s.cfg.Logger.Error("batch directory: job lost", "batch", d.ID, "err", d.Error())
		} else {
			s.cfg.Logger.Warn("batch directory: job damaged", "batch", d.ID, "err", d.Error())
		}
	}
	s.jobs.expire(s.cfg.Now()) // those that expired while Governor was down
}

func (s *Server) restoreJob(l journal.Loaded) error {
	var h jobHeader
	if err := json.Unmarshal(l.Header, &h); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	n := l.Job.Total()
	e := &execution{id: h.ID, format: h.Format, options: h.Options, total: n, job: true,
		done: make([]bool, n), summary: Summary{Total: n}, started: h.Created}
	if l.Finished == nil {
		if err := json.Unmarshal(l.Input, &e.items); err != nil {
			return fmt.Errorf("input: %w", err)
		}
		if len(e.items) != n {
			return fmt.Errorf("input: %d items, want %d", len(e.items), n)
		}
		sec, err := decodeSecret(l.Secret)
		if err != nil {
			return fmt.Errorf("secret: %w", err)
		}
		e.creds = sec.Creds
		for i, h := range sec.ItemHeaders {
			if i < 0 || i >= n {
				return fmt.Errorf("secret: headers of item %d of %d", i, n)
			}
			if e.items[i].Header == nil {
				e.items[i].Header = h
				continue
			}
			maps.Copy(e.items[i].Header, h)
		}
		e.customIDs = customIDs(e.items)
		e.prior = l.Sent
	}
	var ids []string
	for _, r := range l.Results {
		// Only what listing the job needs: decoding whole metas took
		// two thirds of a start-up on a directory of many results.
		var m struct {
			CustomID string       `json:"custom_id"`
			Status   proxy.Status `json:"status"`
		}
		if err := json.Unmarshal(r.Meta, &m); err != nil {
			return fmt.Errorf("item %d: %w", r.Index, err)
		}
		if !e.done[r.Index] {
			e.done[r.Index] = true
			e.summary.add(m.Status)
		}
		if m.CustomID != "" && e.items == nil {
			if ids == nil {
				ids = make([]string, n)
			}
			ids[r.Index] = m.CustomID
		}
	}
	if e.items == nil {
		e.customIDs = ids
	}
	if l.Finished != nil {
		var end jobEnd
		if err := json.Unmarshal(l.Finished, &end); err != nil {
			return fmt.Errorf("end: %w", err)
		}
		e.started, e.finished, e.summary.Stopped = end.Started, end.Finished, end.Stopped
		j := &job{exec: e, created: h.Created, cancel: func(error) {}, done: make(chan struct{}), cancelled: end.Cancelled}
		s.attach(j, l.Job)
		close(j.done)
		s.jobs.restore(j)
		return nil
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	j := &job{exec: e, created: h.Created, cancel: cancel, done: make(chan struct{}), cancelled: l.Cancelled}
	s.attach(j, l.Job)
	s.jobs.restore(j)
	if l.Cancelled {
		cancel(errCancelled)
	}
	s.cfg.Logger.Info("batch job resumed", "batch", e.id, "items", n, "recorded", len(l.Results), "cancelled", l.Cancelled)
	s.run(ctx, j)
	return nil
}

// finishJournal records a job's end on disk.
func (s *Server) finishJournal(j *job) {
	e := j.exec
	e.mu.Lock()
	end := jobEnd{Started: e.started, Finished: e.finished, Stopped: e.summary.Stopped}
	e.mu.Unlock()
	j.mu.Lock()
	end.Cancelled = j.cancelled
	j.mu.Unlock()
	payload, _ := json.Marshal(end)
	if err := j.journal.Finish(payload); err != nil {
		s.cfg.Logger.Error("batch job: end not stored on disk; it will be finished again after a restart", "batch", e.id, "err", err)
	}
}

// dirRetry is how often a batch directory held by another process is
// tried again.
const dirRetry = 500 * time.Millisecond

// awaitDir takes the batch directory once the process that holds it lets
// it go, then lists and resumes its jobs; it gives up at Shutdown.
func (s *Server) awaitDir() {
	t := time.NewTicker(dirRetry)
	defer t.Stop()
	var last string // the last error logged
	for {
		select {
		case <-s.paused:
			return
		case <-t.C:
		}
		dir, err := journal.Open(s.cfg.Dir)
		if err != nil {
			if !errors.Is(err, journal.ErrLocked) && err.Error() != last {
				last = err.Error()
				s.cfg.Logger.Error("batch directory unusable; trying again", "err", err)
			}
			continue
		}
		s.dir = dir
		s.restore()
		close(s.dirOpen)
		s.cfg.Logger.Info("batch directory taken: async jobs are served", "dir", s.cfg.Dir)
		return
	}
}

// dirReady reports whether the batch directory, if any, is open.
func (s *Server) dirReady() bool {
	select {
	case <-s.dirOpen:
		return true
	default:
		return false
	}
}

// codeDirBusy is the error of the async job endpoints while another
// process holds the batch directory.
const codeDirBusy = "batch_directory_busy"

// dirBusy answers 503 batch_directory_busy: another process holds the
// batch directory.
func (s *Server) dirBusy(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "5")
	writeError(ctx, fasthttp.StatusServiceUnavailable, codeDirBusy,
		"the batch directory ("+s.cfg.Names.Dir+") is in use by another process, usually a Governor still draining on the same volume: async jobs are served here once it lets it go; sync batches (POST "+PathBatch+") run meanwhile")
}
