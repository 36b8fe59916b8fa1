// Command govbench measures Governor as a user would meet it: real
// processes on loopback, a load generator that never retries, and a
// Markdown report with every figure BENCHMARKS.md publishes.
//
// # Why real processes
//
// The Go benchmarks of the proxy, queue and aimd packages measure code in
// one process. They cannot show what an operator pays for a sidecar (CPU
// per call, memory, latency added on a real socket, compared with the
// reverse proxy they would otherwise run) nor whether the controller gets
// the goodput it promises against a provider that pushes back in real
// time. govbench builds the governor and mockllm binaries (or takes them
// with -governor and -mockllm), starts them, and Debian's nginx as the
// comparison peer, on free ports of 127.0.0.1, drives them with closed-loop
// clients and reads /proc for CPU time and memory. Every process it starts
// is stopped when it returns, on an error and on Ctrl-C.
//
// # Scenarios
//
//   - overhead: a provider that answers at once; direct, through Governor,
//     through nginx and through the smallest correct fasthttp reverse proxy
//     (the floor of the stack Governor is built on: govbench runs it as a
//     process of its own by executing itself with GOVBENCH_FASTHTTP_PROXY
//     set), back to back, at each -concurrency, JSON and SSE. Added
//     latency, throughput, CPU per call, peak RSS, time to first streamed
//     byte.
//   - goodput (s1..s4, s2shared): 64 closed-loop clients push calls through
//     Governor into a provider that limits them; makespan against the
//     optimum the limit allows, calls lost and duplicated, 429s,
//     convergence. Each runs once per -presets entry (default and
//     phoenix), side by side.
//   - s2shared: 2 and 4 Governor processes (-s2shared-governors), each
//     with its share of 64 clients, spend one budget, as the replicas of
//     a service spend one API key's: S2's request bucket (requests per
//     minute) at each of -s2shared-latencies, and the matrix's OpenAI
//     tokens-per-minute budget with its headers, calls of mixed sizes,
//     and optionally the same budget stated only in its 429s' messages
//     (-s2shared-budgets); without coordination and over Redis (which
//     shares no token budget), for -s2shared-duration. Calls answered
//     against the most the budget allows, 429s per 100 calls, Jain's
//     fairness between the Governors, calls lost and duplicated.
//   - memory: 10,000 calls waiting in one lane; resident memory per waiting
//     call above idle.
//   - matrix (only when asked for): providers that limit the way real ones
//     do, each cell a goodput run with its own goal: hard caps
//     (-matrix-caps) at each of -matrix-latencies; a binding tokens-per-
//     minute budget with calls of mixed sizes, OpenAI's shape with its
//     token headers and without, and Anthropic's output-tokens budget; and
//     servers that slow down past a knee instead of answering 429
//     (-matrix-knees), and the same servers with every call streamed
//     (-matrix-stream-knees, none by default). -matrix-caps none,
//     -matrix-knees none and -matrix-tokens=false leave a kind of cell
//     out. See scenario_matrix.go.
//   - tenants: one lane of limit 4 shared by 2 closed-loop clients of one
//     tenant (X-Governor-Tenant) and 32 of another, then by two async batch
//     jobs submitted 2 s apart; each run again with every call of one
//     tenant. The small tenant's share of the calls, the jobs' rates.
//
// BENCHMARKS.md at the repository root holds the results of a full run,
// the definitions of the figures and the commands to reproduce them.
// `govbench -smoke` runs every scenario in seconds so that CI keeps the
// command working; it asserts no thresholds.
package main
