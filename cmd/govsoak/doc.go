// Command govsoak runs Governor under mixed traffic for a long time, against
// a simulated provider that fails on purpose, and checks that nothing is
// lost, nothing is sent upstream more often than Governor says, and that
// memory and goroutines stay flat.
//
// It builds cmd/governor and cmd/mockllm into a temporary directory, starts
// a mockllm process with a concurrency cap (429 with Retry-After) and
// random 529, 500 and connection-reset faults, and a governor process in
// front of it, then drives for -duration:
//
//   - interactive chat completions (JSON), some with forced fault
//     sequences (X-Mock-Fault: 429, 529, reset, a JSON answer cut half way,
//     5xx bursts, a hang past the attempt timeout);
//   - streamed chat completions (SSE) and Anthropic messages, JSON and
//     streamed, through a prefix route;
//   - sync batches (JSON, and NDJSON progress) and async batch jobs,
//     polled, fetched and deleted.
//
// Every call and batch item carries a unique X-Request-Id. At the end the
// provider's count of requests per id (GET /stats, polled during the run so
// that no id ages out of its bounded table) is compared with the attempts
// Governor reported for that call (X-Governor-Attempts, or the batch item's
// detail):
//
//   - lost: a call that got no complete answer — no HTTP answer, a cut
//     body, a stream without its end, a batch row missing or DID_NOT_RUN;
//   - duplicated: the provider saw the id more often than Governor's
//     attempts.
//
// Both must be 0; govsoak exits 1 otherwise. A call that failed with an
// answer that says why (Governor's error, or the provider's last answer
// after the retry budget) is counted apart: it is not lost.
//
// Every -sample it records Governor's resident memory (VmRSS), heap in use
// and goroutines (go_goroutines on the admin listener), threads, open file
// descriptors, calls in flight and queued, throughput, and how long
// /healthz took to answer, and prints the table and the totals as Markdown
// (to stdout, and to -out if given).
//
// Usage:
//
//	go run ./cmd/govsoak                  # 10 minutes
//	go run ./cmd/govsoak -smoke           # a few seconds, for CI
//	go run ./cmd/govsoak -duration 30m -out soak.md
package main
