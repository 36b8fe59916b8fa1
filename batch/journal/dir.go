package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// File and directory names inside a batch directory.
const (
	lockName    = "LOCK"
	jobsName    = "jobs"
	damagedName = "damaged"

	headerFile  = "job"     // one frame: total (u32) then the caller's header
	inputFile   = "input"   // one frame: the caller's input
	secretFile  = "secret"  // one frame: the caller's secret; removed at Finish
	journalFile = "journal" // frames appended as items finish

	// A job directory being created or removed has a name starting with
	// this; Open removes what a crash left of one.
	pendingPrefix = "."
)

// ErrLocked reports a directory in use by another process.
var ErrLocked = errors.New("batch directory in use by another process")

// validID is what a job id may be: it names a directory.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Dir is an open batch directory. Its methods are safe for concurrent use.
type Dir struct {
	path string
	lock *os.File
}

// Open opens the batch directory at path, creating it if needed, and locks
// it for this process: a second Open of the same directory, from this
// process or another, fails with ErrLocked until Close.
func Open(path string) (*Dir, error) {
	if err := os.MkdirAll(filepath.Join(path, jobsName), 0o700); err != nil {
		return nil, fmt.Errorf("batch directory: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("batch directory: %w", err)
	}
	if err := lockFile(lf); err != nil {
		holder, _ := os.ReadFile(lf.Name())
		lf.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("%w: %s (holder: %s)", ErrLocked, path, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("batch directory %s: lock: %w", path, err)
	}
	// Who holds it, for the message above; advisory only. The host
	// tells two pods on one volume apart (each may be pid 1).
	if err := lf.Truncate(0); err == nil {
		host, _ := os.Hostname()
		_, _ = fmt.Fprintf(lf, "pid %d on %s\n", os.Getpid(), host)
	}
	return &Dir{path: path, lock: lf}, nil
}

// Close unlocks the directory. Jobs stay on disk.
func (d *Dir) Close() error {
	return d.lock.Close() // closing the file releases its lock
}

func (d *Dir) jobPath(id string) string { return filepath.Join(d.path, jobsName, id) }

// Create records a new job: its number of items, a small header (what the
// caller needs to list the job), its input and a secret (what it needs to
// run the job, removed when it finishes). It returns once all of it is on
// disk; a crash before that leaves nothing behind.
func (d *Dir) Create(id string, total int, header, input, secret []byte) (*Job, error) {
	if !validID.MatchString(id) {
		return nil, fmt.Errorf("job id %q: want letters, digits, '_' or '-'", id)
	}
	final := d.jobPath(id)
	if _, err := os.Stat(final); err == nil {
		return nil, fmt.Errorf("job %s: exists", id)
	}
	tmp := filepath.Join(d.path, jobsName, pendingPrefix+"new-"+id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	err := writeJobFiles(tmp, total, header, input, secret)
	if err == nil {
		err = syncDir(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = syncDir(filepath.Dir(final))
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	j, err := openJob(id, final, total, 0)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

func writeJobFiles(dir string, total int, header, input, secret []byte) error {
	if total < 0 || total > maxItems {
		return fmt.Errorf("total %d out of range", total)
	}
	if err := writeFileFrame(filepath.Join(dir, headerFile), encodeHeader(total, header)); err != nil {
		return err
	}
	if err := writeFileFrame(filepath.Join(dir, inputFile), input); err != nil {
		return err
	}
	if err := writeFileFrame(filepath.Join(dir, secretFile), secret); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// Remove forgets job j: it is closed and its directory deleted. A reader
// opened before keeps reading what it had.
func (d *Dir) Remove(j *Job) error {
	j.close()
	trash := filepath.Join(d.path, jobsName, pendingPrefix+"del-"+j.id)
	if err := os.Rename(j.path, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("job %s: remove: %w", j.id, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("job %s: remove: %w", j.id, err)
	}
	return nil
}

// syncDir makes a directory's entries (files created or renamed in it)
// durable.
func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
