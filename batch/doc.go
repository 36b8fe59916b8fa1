// Package batch is Governor's batch API: one request carries thousands of
// LLM calls, Governor runs them as fast as the provider allows, and the
// answer holds every output in input order with per-item execution details.
//
// # Why
//
// Evaluations run from notebooks and shell scripts that cannot run calls
// concurrently; provider batch APIs take up to a day and return results
// unordered. A batch here is the server-side form of Arize Phoenix's
// AsyncExecutor: items travel exactly the governed path of proxied calls
// (same lanes, queue, AIMD controller and retries, through proxy.Proxy.Do),
// at urgency u=5 by default, so interactive calls (u=3) overtake them.
// A batch holds at most Config.Window items waiting or in flight at once,
// claimed in input order by a fixed set of workers: memory grows with the
// results, not with the waiting work.
//
// # Endpoints
//
//	POST   /governor/batch                 run a batch, answer when it is done
//	POST   /governor/batches               start an async job: 202 {"id", "status", "total", …}
//	GET    /governor/batches               the jobs held
//	GET    /governor/batches/{id}          a job's status and counts per item status
//	GET    /governor/batches/{id}/results  its results (409 while running unless ?partial=true)
//	DELETE /governor/batches/{id}          cancel it (what has not started becomes DID_NOT_RUN,
//	                                       what is in flight is cut and FAILED),
//	                                       or forget it once finished
//
// # JSON format
//
// Content-Type application/json (or curl's default for -d):
//
//	{
//	  "requests": [                         required, 1 … GOVERNOR_BATCH_MAX_ITEMS
//	    {
//	      "custom_id": "q-1",               optional; unique within the batch
//	      "method": "POST",                 optional; POST is the only method
//	      "url": "/v1/chat/completions",    a path, routed like a proxied call's
//	                                        ("/anthropic/v1/messages" takes a prefix route);
//	                                        never a URL: items reach configured upstreams only
//	      "headers": {"X-Request-Id": "…"}, optional; string values; Host, Content-Length,
//	                                        Connection, Transfer-Encoding, Priority and
//	                                        X-Governor-* are Governor's to set
//	      "body": {…}                       required; a JSON object, sent as is
//	    }
//	  ],
//	  "max_retries": 3,          retries after the first attempt, 0 … 100 (default GOVERNOR_MAX_RETRIES)
//	  "exit_on_error": false,    stop at the first item that fails for good
//	  "fallback": null,          output of an item that did not complete (any JSON)
//	  "priority": 5,             RFC 9218 urgency of the items, 0 (most urgent) … 7
//	  "concurrency": 8,          at most this many of the batch's items waiting or in flight
//	  "timeout": "30s"           per attempt, from dispatch: a duration or a number of seconds
//	}
//
// Unknown fields are errors, so a misspelt option never passes silently.
// Items inherit the batch request's Authorization, x-api-key,
// anthropic-version, OpenAI-Organization and OpenAI-Project headers unless
// they carry their own.
//
// The answer, 200 once every item has a row:
//
//	{
//	  "outputs": [ {"status_code": 200, "body": {…}}, null, … ],
//	  "details": [ {"status": "COMPLETED_WITH_RETRIES", "attempts": 3,
//	                "errors": ["429 rate_limit_exceeded", "429 rate_limit_exceeded"],
//	                "queue_seconds": 0.412, "execution_seconds": 1.305,
//	                "status_code": 200}, … ],
//	  "summary": {"total": 2, "COMPLETED": 0, "COMPLETED_WITH_RETRIES": 1,
//	              "FAILED": 0, "DID_NOT_RUN": 1, "wall_seconds": 1.72,
//	              "stopped": "exit_on_error"}
//	}
//
// outputs[i] and details[i] belong to requests[i]. An output is the
// provider's answer (its body as JSON when it is JSON, else a string) for a
// COMPLETED or COMPLETED_WITH_RETRIES item, and the fallback for a FAILED
// or DID_NOT_RUN one, as in Phoenix. A detail's status is one of Phoenix's
// ExecutionStatus words; errors has one short string per failed attempt
// (and, for an item that failed before any attempt, Governor's reason);
// status_code is the provider's last status, omitted when it never
// answered. The summary counts items per status, gives the wall time and,
// when the batch ended early, why: exit_on_error, cancelled,
// client_disconnected or shutdown.
//
// # OpenAI Batch format
//
// Content-Type application/jsonl (or application/x-ndjson): the OpenAI Batch
// input file, one {"custom_id", "method", "url", "body"} per line
// (custom_id required; blank lines skipped; errors name the line). The
// options are query parameters: ?max_retries=2&exit_on_error=true&
// fallback=null&priority=5&concurrency=8&timeout=30s. The answer is the
// OpenAI Batch output format, one line per input line, in input order:
//
//	{"id": "batch_req_…", "custom_id": "q-1",
//	 "response": {"status_code": 200, "request_id": "req_…", "body": {…}}, "error": null}
//	{"id": "batch_req_…", "custom_id": "q-2",
//	 "response": null, "error": {"code": "did_not_run", "message": "…"}}
//
// response is the provider's last answer whatever its status; error is set
// only when there is none (DID_NOT_RUN, or Governor's own error such as
// upstream_unreachable).
//
// # Progress
//
// With Accept: application/x-ndjson, either format is answered with one
// line per item as it finishes, in finishing order, then a summary line:
//
//	{"index": 1, "custom_id": "q-2", "output": {…}, "detail": {…}}
//	{"index": 0, "custom_id": "q-1", "output": {…}, "detail": {…}}
//	{"summary": {…}}
//
// # Async jobs
//
// POST /governor/batches takes the same bodies and answers 202 at once.
// GET /governor/batches/{id} reports the status (running, completed,
// cancelled), the counts per item status (PENDING while running),
// created_at, started_at, finished_at and expires_at. The results are the
// document the sync endpoint would have answered, in the job's format;
// ?partial=true shows a running job's finished items, the others as
// PENDING. Finished jobs are forgotten GOVERNOR_BATCH_TTL after they finish,
// and at most GOVERNOR_BATCH_MAX_JOBS are held (beyond, 503).
//
// # Lifetimes
//
// A sync batch, or a progress stream, whose client disconnects is
// cancelled: its waiting items leave the queue and nothing more is sent
// for it. A batch that stops early (cancelled, exit_on_error, its client
// gone) cuts its items in flight at once, closing their connections to the
// provider: such an item is FAILED, its last error "cut: cancelled" (or
// exit_on_error, shutdown, client disconnected). On shutdown, sync batches
// and progress streams are the proxy's calls in progress and drain with
// them; async jobs are cancelled at once, since nobody could fetch their
// results.
//
// Bad input is rejected whole, before anything runs, with a 400 that
// names the request index or line: invalid JSON, an empty batch, too many
// items, a duplicate custom_id, a url that is absolute or Governor's own,
// an unsupported method, an unknown option. A body over
// GOVERNOR_MAX_BODY_BYTES gets 413.
package batch
