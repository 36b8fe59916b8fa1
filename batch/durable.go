package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

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
	Errors      []string     `json:"errors,omitempty"`
	Queue       int64        `json:"queue_ns"`
	Execution   int64        `json:"execution_ns"`
	StatusCode  int          `json:"status_code,omitempty"`
	ContentType string       `json:"content_type,omitempty"`
	RequestID   string       `json:"request_id,omitempty"`
	Err         *proxy.Error `json:"err,omitempty"`
	Lane        string       `json:"lane,omitempty"`
}

func metaOf(r *Row, customID string) rowMeta {
	return rowMeta{CustomID: customID, Status: r.Status, Attempts: r.Attempts, Errors: r.Errors,
		Queue: int64(r.Queue), Execution: int64(r.Execution), StatusCode: r.StatusCode,
		ContentType: r.ContentType, RequestID: r.RequestID, Err: r.Err, Lane: r.Lane}
}

func (m *rowMeta) row() Row {
	return Row{Status: m.Status, Attempts: m.Attempts, Errors: m.Errors,
		Queue: time.Duration(m.Queue), Execution: time.Duration(m.Execution), StatusCode: m.StatusCode,
		ContentType: m.ContentType, RequestID: m.RequestID, Err: m.Err, Lane: m.Lane}
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
	meta, err := json.Marshal(metaOf(r, d.customIDs(i)))
	if err == nil {
		err = d.j.Put(i, meta, r.Body)
	}
	if err != nil {
		_ = d.fallback.put(i, r)
		return fmt.Errorf("item %d kept in memory: %w", i, err)
	}
	return nil
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
	input, err := json.Marshal(b.Items)
	if err != nil {
		return err
	}
	secret, err := json.Marshal(e.creds)
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

// restore loads the jobs of the batch directory: finished ones are listed
// again, unfinished ones resume (cancelled ones finish at once).
func (s *Server) restore() {
	loaded, damage := s.dir.Load()
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
	for _, l := range loaded {
		if err := s.restoreJob(l); err != nil {
			l.Job.Close()
			s.cfg.Logger.Error("batch directory: job unreadable, left on disk", "batch", l.Job.ID(), "err", err)
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
	e := &execution{id: h.ID, format: h.Format, options: h.Options, total: n,
		done: make([]bool, n), summary: Summary{Total: n}, started: h.Created}
	if l.Finished == nil {
		if err := json.Unmarshal(l.Input, &e.items); err != nil {
			return fmt.Errorf("input: %w", err)
		}
		if len(e.items) != n {
			return fmt.Errorf("input: %d items, want %d", len(e.items), n)
		}
		if err := json.Unmarshal(l.Secret, &e.creds); err != nil {
			return fmt.Errorf("secret: %w", err)
		}
		e.customIDs = customIDs(e.items)
	}
	var ids []string
	for _, r := range l.Results {
		var m rowMeta
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
