// Command governor is a sidecar proxy that governs how fast applications
// call their LLM providers. Run `governor -h` for its configuration.
//
// It is configured by GOVERNOR_* environment variables only (config.go:
// one field per variable, with its default and its line of -h; no other
// package reads the environment), and takes two flags:
// -demo runs it in front of a simulated provider in the same process
// (demo.go), -version prints its version. `governor batch` (batchcmd.go,
// package internal/batchcli) submits an OpenAI Batch JSONL file to a
// running Governor as an async job and writes its results.
//
// serve (main.go) wires the packages together: package proxy with its
// lanes, package batch on the proxy's API, package ui, and, with
// GOVERNOR_REDIS_URL, package coord behind lane.Coordinator (coord.go).
// It serves the main listener and the admin listener (admin.go,
// listeners.go: /metrics, /healthz, /readyz), and on SIGTERM, SIGINT or
// SIGHUP (SIGINT and SIGHUP unless started with them ignored, as a shell
// script's background job and nohup do) reports not
// ready, drains calls and batches for GOVERNOR_DRAIN_TIMEOUT and exits; a
// second signal exits at once. /metrics writes Governor's
// families with their # HELP and # TYPE lines (metrics.go).
//
// Exit status: 0 after a drain (one that GOVERNOR_DRAIN_TIMEOUT cut
// short included), 1 when Governor could not start or run (a listener's
// address in use, say) or on a second signal, 2 for a bad flag or an
// invalid variable, named in the message.
package main
