// Package batchcli is the client side of `governor batch`: it submits an
// OpenAI Batch JSONL file to a running Governor as an async job
// (POST /governor/batches), follows the job's progress, and writes its
// results, one line per input line, in input order.
//
// The job runs in Governor, not in the client: the client only polls.
// So a dropped connection, or a Governor that restarts with its jobs kept
// on disk, costs nothing but a wait: the client keeps asking, for
// Config.ReconnectTimeout, and picks the job up where it is. A client that
// is stopped (Ctrl-C answered "leave it running", or killed) can be
// replaced by another that reattaches with the job's id, which is printed
// when the job is submitted.
//
// The results are downloaded whole into a temporary file and checked
// (one line per item) before they reach the output, so an interrupted
// download is fetched again instead of leaving half a file.
//
// [Run] returns the command's exit status: 0 when every item completed,
// 1 when any failed or did not run (or the job could not be followed to
// its end), 2 for a usage error, which includes an input Governor rejects
// as malformed and a Config.JobID Governor does not have (never
// submitted there, expired, or lost in a restart without a batch
// directory).
package batchcli
