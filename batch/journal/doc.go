// Package journal keeps Governor's async batch jobs on disk, so that they
// survive a restart: each job's input, and its results as items finish.
//
// A batch directory (Open) holds one folder per job. Create writes the
// job's header, input and secret, each as one checksummed file, and returns
// once they are on disk. Results go to the job's journal, an append-only
// file of checksummed records: Put returns once its record is on disk
// (fsync, shared by the writers that arrive meanwhile), so a result Put has
// returned for survives the process being killed at any instant, and a
// crash mid-write leaves at most a cut record at the end. A write the disk
// refuses (full, or past a file size limit) is cut off again and reported
// as a *WriteError: the journal stays whole, and the record can be put
// again once there is room. Sent notes an attempt of an item as it is
// sent (in a file apart, without waiting for the disk), so that after a
// restart Load counts the attempts of the items whose result was never
// recorded.
// Cancel and Finish append records of their own; Finish also removes the
// secret.
//
// Load, after a restart, returns every job with its recorded results (meta
// only) and the attempts sent of the items without one, and never fails
// on damage: a journal that ends in a cut or
// corrupt record keeps every whole record before it and is cut back to
// them; a job whose header (or, unfinished, input or secret) is unreadable
// is moved to the directory's "damaged" folder and reported lost. Each
// case is reported as a *Damage.
//
// Readers (Job.Open) read results back one at a time, by item index, from
// a file of their own: memory holds one result, however large the job.
// The directory is locked while open: a second Open of it, from this
// process or another, gets ErrLocked (naming the holder's pid and host)
// until the first is closed or its process ends.
//
// Why files rather than an embedded database is in DESIGN.md.
package journal
