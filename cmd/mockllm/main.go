// Command mockllm runs the simulated LLM provider of package mockllm on a
// TCP address, for demos, end-to-end tests with the official SDKs and load
// benchmarks. Every setting is a flag; `mockllm -h` lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmgovernor/governor/mockllm"
)

// shutdownTimeout bounds the wait for requests in flight after a signal.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run serves until ctx ends and returns the exit code: 0 after a clean
// shutdown, 2 for bad flags, 1 when serving fails.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      mockllm.Config
		listen   string
		schedule string
	)
	fs.StringVar(&listen, "listen", "127.0.0.1:8081", "`address` to listen on (port 0 picks a free port)")
	fs.DurationVar(&cfg.Latency, "latency", 0, "median time before an answer or a stream's first chunk")
	fs.Float64Var(&cfg.LatencySpread, "spread", 0, "lognormal sigma of the latency as a fraction (0.2 = about 20%); 0 keeps it fixed")
	fs.DurationVar(&cfg.ChunkDelay, "chunk-delay", 0, "pause between stream events")
	fs.IntVar(&cfg.StreamChunks, "chunks", 8, "content chunks per streamed answer")
	fs.IntVar(&cfg.MaxConcurrency, "max-concurrency", 0, "requests served at once; beyond it 429 at once (0 = no cap)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "token bucket refill in requests per second; no token means 429 (0 = no bucket)")
	fs.IntVar(&cfg.Burst, "burst", 0, "token bucket size (0 = max(1, rate))")
	fs.IntVar(&cfg.TokensPerMinute, "tpm", 0, "tokens-per-minute budget (OpenAI's TPM): prompt + max_tokens per request, x-ratelimit-*-tokens headers (0 = none)")
	fs.IntVar(&cfg.InputTokensPerMinute, "itpm", 0, "input-tokens-per-minute budget (Anthropic's ITPM), anthropic-ratelimit-input-tokens-* headers (0 = none)")
	fs.IntVar(&cfg.OutputTokensPerMinute, "otpm", 0, "output-tokens-per-minute budget (Anthropic's OTPM): max_tokens, unused ones given back (0 = none)")
	fs.DurationVar(&cfg.TokenWindow, "token-window", time.Minute, "time in which the token budgets refill whole: -tpm, -itpm and -otpm are then budgets per this\n(24h for a daily budget such as OpenAI's TPD, 1s for one per second); the reset headers follow it")
	fs.BoolVar(&cfg.NoRateLimitHeaders, "no-ratelimit-headers", false, "publish no x-ratelimit-* / anthropic-ratelimit-* headers (429s keep their retry hints)")
	fs.BoolVar(&cfg.FillMaxTokens, "fill-max-tokens", false, "make every answer exactly max_tokens long instead of a short echo")
	fs.Float64Var(&cfg.OutputTokensPerSecond, "tokens-per-second", 0, "output speed: an answer of n tokens takes n/this after its first byte (0 = at once)")
	fs.IntVar(&cfg.Knee, "knee", 0, "queue instead of refusing: never 429, and beyond this many requests in flight each one takes (in flight / knee)² as long (0 = off)")
	fs.StringVar(&schedule, "schedule", "", "capacity `changes` during the run: OFFSET:key=value[:key=value],...\n"+
		"keys cap, rate, burst (0 removes a limit; an omitted key keeps its value),\n"+
		"offsets from the start, increasing, e.g. \"20s:cap=8,40s:cap=32:rate=50\"")
	fs.Float64Var(&cfg.Faults.Error500, "fault-500", 0, "probability of a 500 server_error")
	fs.Float64Var(&cfg.Faults.Overloaded529, "fault-529", 0, "probability of a 529 overloaded_error")
	fs.Float64Var(&cfg.Faults.Reset, "fault-reset", 0, "probability of a connection reset (TCP RST) without answer")
	fs.Float64Var(&cfg.Faults.Hang, "fault-hang", 0, "probability of a request that never answers")
	fs.Float64Var(&cfg.Faults.OverloadedMidStream, "fault-overload-mid-stream", 0, "probability of a stream ended half way by the provider's overload error event\n(Anthropic: event: error, overloaded_error; OpenAI: data: {\"error\":…} then [DONE]);\na JSON answer gets 529 on /v1/messages, 503 elsewhere")
	fs.Int64Var(&cfg.Seed, "seed", 0, "random seed for latency spread and faults (0 = from the clock)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: mockllm [flags]

A simulated LLM provider: OpenAI's /v1/chat/completions, /v1/embeddings and
/v1/models and Anthropic's /v1/messages, JSON and streamed, behind a
concurrency cap, a request bucket, token budgets (OpenAI TPM, Anthropic
ITPM/OTPM), a knee where calls slow down instead of failing, a capacity
schedule and random faults.
GET /stats shows what it saw; POST /stats/reset zeroes it. Requests can force
faults with the X-Mock-Fault, X-Mock-Latency and X-Mock-Retry-After headers
(see the package documentation of mockllm).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mockllm: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	if cfg.StreamChunks < 1 {
		fmt.Fprintln(stderr, "mockllm: -chunks must be at least 1")
		return 2
	}
	phases, err := mockllm.ParseSchedule(schedule, mockllm.Limits{MaxConcurrency: cfg.MaxConcurrency, Rate: cfg.Rate, Burst: cfg.Burst})
	if err != nil {
		fmt.Fprintf(stderr, "mockllm: -schedule: %v\n", err)
		return 2
	}
	cfg.Schedule = phases
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "mockllm: %v\n", err)
		return 1
	}
	s := mockllm.New(cfg)
	fmt.Fprintf(stdout, "mockllm listening on http://%s\n", ln.Addr())

	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		fmt.Fprintf(stderr, "mockllm: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "mockllm: shutdown: %v\n", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "mockllm: %v\n", err)
		return 1
	}
	return 0
}
