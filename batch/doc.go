// Package batch is Governor's batch API: one request carries thousands of
// LLM calls, Governor runs them as fast as the provider allows, and the
// answer holds every output in input order with per-item execution details.
//
// New registers the endpoints (PathBatch, PathBatches and the jobs under
// it) on a proxy.Proxy; Shutdown stops them. Items go through
// proxy.Proxy.Do, the governed round trip of proxied calls: the same
// lanes, queue, controller and retries, at urgency 5 by default, so
// interactive calls (urgency 3) overtake them. A batch holds at most
// Config.Window items waiting or in flight at once, claimed in input order
// by a fixed set of workers, so memory grows with the results, not with
// the waiting work. An item that finds its lane's queue full waits for
// room and asks again rather than failing.
//
// What a caller can rely on:
//
//   - Every item ends with a row: outputs[i] and details[i] belong to
//     requests[i], in input order, whatever happened to the item.
//   - Bad input is rejected whole, with a 400 that names the request
//     index or line, before anything runs.
//   - Items reach configured upstreams only: an item's url is a path,
//     routed like a proxied call's.
//   - A sync batch whose client leaves is cancelled: its waiting items
//     never run, its items in flight are cut. On Shutdown, sync batches
//     drain with the proxy's calls; async jobs start no more items, and
//     those started get until Shutdown's ctx ends to finish. A job held
//     in memory then ends (the rest DID_NOT_RUN, stopped "shutdown"), and
//     one whose results were not read is logged with the items that did
//     not run; a job kept in a batch directory (Config.Dir) resumes at
//     the next start. Pause and AwaitRead, before Shutdown, let the
//     clients of jobs held in memory fetch their results first (those
//     who asked about their jobs within the minute before).
//   - The answers batches hold in memory (async jobs without a batch
//     directory; sync batches until their document is written) are
//     bounded by Config.MaxResultBytes: finished jobs are forgotten early
//     to make room (those whose results were read first), and an answer that still does not fit is dropped (its
//     item FAILED, results_memory_full). A progress answer keeps none.
//   - With a batch directory, a job's results are recorded on disk as
//     items finish and read back from there; after a restart on the same
//     directory, unfinished jobs resume by themselves, and an item whose
//     result was recorded is never sent again (one still in flight at
//     the stop is, its details counting the attempts sent before the
//     restart too). A directory that refuses a result (a full disk)
//     pauses the job, its status saying so, until it takes results
//     again.
//
// The wire formats (JSON, OpenAI Batch JSONL, NDJSON progress, async jobs)
// are described in API.md beside this file.
package batch
