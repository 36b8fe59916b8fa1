package batchcli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Exit statuses of Run.
const (
	ExitCompleted  = 0 // every item completed
	ExitIncomplete = 1 // some item failed or did not run, or the job could not be followed
	ExitUsage      = 2 // bad arguments, input Governor rejects, or a -job id it does not have
)

// Config is one run of `governor batch`. The zero value of each optional
// field is the documented default.
type Config struct {
	// URL is Governor's main listener, such as http://127.0.0.1:8080.
	URL string
	// Input is the OpenAI Batch JSONL file to submit. Empty when JobID is
	// set.
	Input string
	// JobID, when set, reattaches to that job instead of submitting one.
	JobID string
	// Output is where the results go; empty means Stdout.
	Output string
	// Options are the batch's options, sent as query parameters
	// (max_retries, priority, …).
	Options url.Values
	// Header is sent with the submission: credentials the items inherit,
	// and anything given with -H. See Credentials.
	Header http.Header
	// Token, when set, is sent as X-Governor-Token on every request.
	Token string

	// Poll is the time between two progress requests; 0 means 1s.
	Poll time.Duration
	// ReconnectTimeout is how long Run keeps trying to reach Governor
	// about a job before it gives up; 0 means 15 minutes.
	ReconnectTimeout time.Duration

	// Interrupt delivers the user's Ctrl-C. Nil means none.
	Interrupt <-chan os.Signal
	// Stdin answers the question asked on Ctrl-C when StdinTerminal.
	Stdin         io.Reader
	StdinTerminal bool
	// Stdout receives the results when Output is empty.
	Stdout io.Writer
	// Stderr receives the progress and the messages; StderrTerminal draws
	// a bar there instead of plain lines.
	Stderr         io.Writer
	StderrTerminal bool
	// StderrWidth returns the columns of the terminal on stderr, asked at
	// each redraw since it may be resized: the bar is cut to fit, or each
	// redraw would leave a wrapped line behind. Nil, or 0, means unknown:
	// the bar is not cut.
	StderrWidth func() int

	// HTTP is the client; nil means one made for Run, whose idle
	// connections Run closes when it returns.
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

const requestTimeout = 30 * time.Second // one status or cancel request

// Run submits or reattaches to a job, follows it to its end, writes its
// results and returns the exit status.
func Run(ctx context.Context, cfg Config) int {
	r := newRunner(cfg)
	defer r.c.http.CloseIdleConnections()
	if cfg.JobID == "" {
		id, code := r.submit(ctx)
		if id == "" {
			return code
		}
		r.id = id
	}
	st, code := r.wait(ctx)
	if st == nil {
		return code
	}
	wctx, stop := r.interruptible(ctx)
	err := r.writeResults(wctx, st)
	stop()
	if err != nil {
		r.p.say("governor batch: results of %s: %v", r.id, err)
		r.p.say("fetch them again with: %s", r.reattach())
		return ExitIncomplete
	}
	r.summary(st)
	if !st.allCompleted() {
		return ExitIncomplete
	}
	return ExitCompleted
}

// runner is the state of one Run.
type runner struct {
	cfg Config
	c   *client
	p   *progress
	id  string
	now func() time.Time
}

func newRunner(cfg Config) *runner {
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.ReconnectTimeout <= 0 {
		cfg.ReconnectTimeout = 15 * time.Minute
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stdin == nil {
		cfg.Stdin = strings.NewReader("")
	}
	r := &runner{
		cfg: cfg,
		c:   &client{base: strings.TrimRight(cfg.URL, "/"), token: cfg.Token, http: cfg.HTTP, header: cfg.Header},
		id:  cfg.JobID,
		now: cfg.Now,
	}
	r.p = &progress{w: cfg.Stderr, terminal: cfg.StderrTerminal, width: cfg.StderrWidth}
	return r
}

// submit posts the input and returns the job's id, or "" and the exit
// status.
func (r *runner) submit(ctx context.Context) (string, int) {
	f, err := os.Open(r.cfg.Input)
	if err != nil {
		r.p.say("governor batch: %v", err)
		return "", ExitUsage
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		r.p.say("governor batch: %v", err)
		return "", ExitUsage
	}
	sctx, stopInterrupt := r.interruptible(ctx)
	st, err := r.c.submit(sctx, f, fi.Size(), r.cfg.Options)
	interrupted := err != nil && sctx.Err() != nil && ctx.Err() == nil
	stopInterrupt()
	switch {
	case interrupted:
		r.p.say("governor batch: interrupted while submitting %s: no job was started", r.cfg.Input)
		return "", ExitIncomplete
	case rejected(err):
		r.p.say("governor batch: Governor rejected %s: %v", r.cfg.Input, err)
		return "", ExitUsage
	case err != nil:
		r.p.say("governor batch: submit %s to %s: %v", r.cfg.Input, r.cfg.URL, err)
		return "", ExitIncomplete
	}
	r.id = st.ID
	r.p.id = st.ID
	r.p.say("submitted %s: job %s, %d items; reattach with: %s", r.cfg.Input, st.ID, st.Total, r.reattach())
	return st.ID, 0
}

// reattach is the command that follows this job again.
func (r *runner) reattach() string {
	cmd := "governor batch -url " + r.cfg.URL + " -job " + r.id
	if r.cfg.Output != "" {
		cmd += " -o " + r.cfg.Output
	}
	return cmd
}

// wait polls the job until it is no longer running, drawing its progress,
// and returns its last status, or nil and the exit status.
func (r *runner) wait(ctx context.Context) (*jobStatus, int) {
	r.p.id = r.id
	var lostSince time.Time
	var lostErr error
	seen := r.cfg.JobID == "" // a job this run submitted exists
	stalled := ""             // why the job was last said to be stalled
	for {
		st, err := r.c.status(ctx, r.id, requestTimeout)
		switch {
		case err == nil:
			seen = true
			if !lostSince.IsZero() {
				r.p.say("reattached to job %s", r.id)
				lostSince = time.Time{}
			}
			switch {
			case st.Stalled != "" && st.Stalled != stalled:
				r.p.say("job %s is stalled: %s", r.id, st.Stalled)
			case st.Stalled == "" && stalled != "":
				r.p.say("job %s goes on", r.id)
			}
			stalled = st.Stalled
			r.p.update(st, r.now())
			if !st.running() {
				r.p.endLine()
				return st, 0
			}
		case gone(err) && !seen:
			// -job names a job Governor does not have: a mistyped or
			// expired id, or the wrong -url. Nothing was followed.
			r.p.say("governor batch: -job %s: Governor at %s has no such job: %v", r.id, r.cfg.URL, err)
			return nil, ExitUsage
		case gone(err):
			r.p.say("governor batch: job %s: %v", r.id, err)
			if !lostSince.IsZero() {
				r.p.say("Governor lost the job while it was out of reach: it keeps jobs across restarts only with GOVERNOR_BATCH_DIR")
			}
			return nil, ExitIncomplete
		case ctx.Err() != nil:
			return nil, ExitIncomplete
		case transient(err):
			if lostSince.IsZero() {
				lostSince = r.now()
				r.p.say("lost Governor (%v); job %s runs on there: reconnecting", err, r.id)
			}
			lostErr = err
			if r.now().Sub(lostSince) >= r.cfg.ReconnectTimeout {
				r.p.say("governor batch: no answer about job %s for %s (%v); reattach later with: %s",
					r.id, r.cfg.ReconnectTimeout, lostErr, r.reattach())
				return nil, ExitIncomplete
			}
		default:
			r.p.say("governor batch: job %s: %v", r.id, err)
			return nil, ExitIncomplete
		}

		select {
		case <-ctx.Done():
			return nil, ExitIncomplete
		case <-r.cfg.Interrupt:
			if !r.interrupted(ctx) {
				return nil, ExitIncomplete
			}
		case <-time.After(r.cfg.Poll):
		}
	}
}

// interrupted handles a Ctrl-C: it asks whether to cancel the job when
// stdin is a terminal, and cancels it if told to. It reports whether to
// go on waiting (for the cancelled job's results).
func (r *runner) interrupted(ctx context.Context) bool {
	if !r.cfg.StdinTerminal {
		r.p.say("interrupted: job %s keeps running in Governor; reattach with: %s", r.id, r.reattach())
		return false
	}
	r.p.endLine()
	fmt.Fprintf(r.cfg.Stderr, "cancel job %s? Its items not yet finished will not run, those in flight are cut. [y/N] ", r.id)
	answer := make(chan string, 1)
	go func() { // ends when the user answers, or with the process
		line, _ := bufio.NewReader(r.cfg.Stdin).ReadString('\n')
		answer <- strings.TrimSpace(strings.ToLower(line))
	}()
	var yes bool
	select {
	case a := <-answer:
		yes = a == "y" || a == "yes"
	case <-r.cfg.Interrupt:
		fmt.Fprintln(r.cfg.Stderr)
	case <-ctx.Done():
	}
	if !yes {
		r.p.say("job %s keeps running in Governor; reattach with: %s", r.id, r.reattach())
		return false
	}
	if err := r.c.cancel(ctx, r.id, requestTimeout); err != nil {
		r.p.say("governor batch: cancel job %s: %v; it may still run: %s", r.id, err, r.reattach())
		return false
	}
	r.p.say("cancelled job %s; fetching what finished", r.id)
	return true
}

// interruptible returns a context that a Ctrl-C also ends, for the steps
// that do not ask (the upload and the download), and the function that
// stops listening.
func (r *runner) interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-r.cfg.Interrupt:
			cancel()
		case <-done:
		}
	})
	return ctx, func() {
		close(done)
		wg.Wait()
		cancel()
	}
}

// writeResults downloads the results into a temporary file, checks that
// there is a line per item, and moves them to the output. A download cut
// short is tried again, as long as Governor answers within
// ReconnectTimeout.
func (r *runner) writeResults(ctx context.Context, st *jobStatus) error {
	var tmp *os.File
	var err error
	if r.cfg.Output != "" {
		tmp, err = createBeside(r.cfg.Output)
	} else {
		tmp, err = os.CreateTemp("", ".governor-batch-*.jsonl")
	}
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	first := r.now()
	for {
		err = r.download(ctx, tmp, st.Total)
		if err == nil || !transient(err) || ctx.Err() != nil || r.now().Sub(first) >= r.cfg.ReconnectTimeout {
			break
		}
		r.p.say("results of job %s: %v; trying again", r.id, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.Poll):
		}
	}
	if err != nil {
		return err
	}
	if r.cfg.Output == "" {
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return err
		}
		_, err = io.Copy(r.cfg.Stdout, tmp)
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), r.cfg.Output)
}

// download writes the results into f, from its start, and checks that
// they have total lines.
func (r *runner) download(ctx context.Context, f *os.File, total int) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	lc := &lineCounter{}
	lines, err := r.c.results(ctx, r.id, io.MultiWriter(f, lc))
	if err != nil {
		return err
	}
	if lines && lc.lines != total {
		return fmt.Errorf("%w: %d result lines for %d items", errShortResults, lc.lines, total)
	}
	return nil
}

// createBeside creates an empty temporary file in path's directory, to be
// renamed to path. Unlike os.CreateTemp (0600), it asks for 0666 and lets
// the umask take its part, so the results get the mode of a file the shell
// creates with > (0644 with the usual umask).
func createBeside(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	for {
		name := filepath.Join(dir, ".governor-batch-"+strconv.FormatUint(rand.Uint64(), 36)+".jsonl")
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// CheckOutput reports whether the results can be written to path: Run
// writes them into a temporary file beside it, then renames it, which
// fails over a directory. Check before Run, so that a job does not run
// for results that cannot be kept.
func CheckOutput(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return errors.New("is a directory: name a file")
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".governor-batch-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // pe names the file the check made up
		}
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// errShortResults is a download that did not bring a line per item; it
// is worth trying again (transient treats every non-API error so).
var errShortResults = errors.New("results cut short")

type lineCounter struct{ lines int }

func (c *lineCounter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			c.lines++
		}
	}
	return len(p), nil
}

// summary prints the job's outcome.
func (r *runner) summary(st *jobStatus) {
	where := "stdout"
	if r.cfg.Output != "" {
		where = r.cfg.Output
	}
	msg := fmt.Sprintf("job %s %s: %d items: %d completed, %d completed with retries, %d failed, %d did not run; results in %s",
		r.id, st.Status, st.Total, st.Counts["COMPLETED"], st.Counts["COMPLETED_WITH_RETRIES"],
		st.Counts["FAILED"], st.Counts["DID_NOT_RUN"], where)
	if st.Stopped != "" {
		msg += " (stopped: " + st.Stopped + ")"
	}
	r.p.say("%s", msg)
}
