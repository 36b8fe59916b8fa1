package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/llmgovernor/governor/internal/batchcli"
)

const batchUsage = `Usage:
  governor batch [flags] input.jsonl
  governor batch [flags] -job ID

Submits an OpenAI Batch JSONL file (one {"custom_id", "method", "url",
"body"} per line) to a running Governor as an async job, draws its progress
on stderr, and writes the results in input order, one OpenAI Batch output
line per input line. The job runs in Governor: if the connection drops or
Governor restarts (with GOVERNOR_BATCH_DIR), the command reattaches by
itself, and says so when a full batch directory stalls the job; Ctrl-C
asks whether to cancel the job or leave it running (with stdin not a
terminal, as in a script, it leaves the job running and exits 1), and
-job ID reattaches later.

Credentials are sent as the official SDKs send them: OPENAI_API_KEY as
"Authorization: Bearer …" for OpenAI-style urls, ANTHROPIC_API_KEY as
"x-api-key" for /v1/messages; -H replaces them (e.g. -H "api-key: …"
for Azure OpenAI). GOVERNOR_API_TOKEN, when
set, is sent as X-Governor-Token.

Exit status: 0 every item completed; 1 some item failed or did not run,
or the job could not be followed to its end; 2 usage error, an input
Governor rejects, or a -job ID Governor does not have.

Flags:
  -url URL          Governor's address (default http://127.0.0.1:8080)
  -o FILE           write the results to FILE instead of stdout
  -job ID           reattach to job ID instead of submitting
  -H 'Name: value'  a header sent with the submission (repeatable)
  -priority N       urgency of the items, 0 (most urgent) … 7 (default 5)
  -max-retries N    retries per item (default GOVERNOR_MAX_RETRIES)
  -concurrency N    at most N items waiting or in flight at once
  -timeout D        time limit of one attempt, such as 30s
  -exit-on-error    stop at the first item that fails for good
  -tenant NAME      whose fair share of the lanes the items take (default:
                    the job is a tenant of its own)
  -poll D           time between progress requests (default 1s)
  -reconnect D      how long to keep trying to reach Governor (default 15m)
  -h                print this help
`

// headerFlags collects repeated -H 'Name: value' flags.
type headerFlags struct{ h http.Header }

func (f *headerFlags) String() string { return "" }

func (f *headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value', got %q", s)
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// runBatchCommand is `governor batch`: main with its inputs explicit.
func runBatchCommand(args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("governor batch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := batchcli.Config{Header: http.Header{}, Options: url.Values{}}
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "")
	fs.StringVar(&cfg.Output, "o", "", "")
	fs.StringVar(&cfg.JobID, "job", "", "")
	fs.Var(&headerFlags{cfg.Header}, "H", "")
	priority := fs.Int("priority", -1, "")
	maxRetries := fs.Int("max-retries", -1, "")
	concurrency := fs.Int("concurrency", 0, "")
	timeout := fs.String("timeout", "", "")
	exitOnError := fs.Bool("exit-on-error", false, "")
	tenant := fs.String("tenant", "", "")
	fs.DurationVar(&cfg.Poll, "poll", time.Second, "")
	fs.DurationVar(&cfg.ReconnectTimeout, "reconnect", 15*time.Minute, "")
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "governor batch: "+format+"\n\n", a...)
		fmt.Fprint(stderr, batchUsage)
		return batchcli.ExitUsage
	}
	inputs, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, batchUsage)
		return batchcli.ExitCompleted
	}
	if err != nil {
		return usageErr("%v", err)
	}
	switch {
	case len(inputs) > 1:
		return usageErr("one input file, got %d: %s", len(inputs), strings.Join(inputs, " "))
	case len(inputs) == 0 && cfg.JobID == "":
		return usageErr("an input file, or -job ID, is required")
	case len(inputs) == 1 && cfg.JobID != "":
		return usageErr("-job reattaches to a job already submitted: give no input file")
	}
	if u, err := url.Parse(cfg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErr("-url: want http://host:port, got %q", cfg.URL)
	}
	if cfg.Output != "" {
		if err := batchcli.CheckOutput(cfg.Output); err != nil {
			return usageErr("-o %s: %v", cfg.Output, err)
		}
	}
	if cfg.Poll <= 0 || cfg.ReconnectTimeout <= 0 {
		return usageErr("-poll and -reconnect must be positive")
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "priority":
			cfg.Options.Set("priority", strconv.Itoa(*priority))
		case "max-retries":
			cfg.Options.Set("max_retries", strconv.Itoa(*maxRetries))
		case "concurrency":
			cfg.Options.Set("concurrency", strconv.Itoa(*concurrency))
		case "timeout":
			cfg.Options.Set("timeout", *timeout)
		case "exit-on-error":
			cfg.Options.Set("exit_on_error", strconv.FormatBool(*exitOnError))
		case "tenant":
			cfg.Options.Set("tenant", *tenant)
		}
	})
	env := envMap(environ)
	cfg.Token = env["GOVERNOR_API_TOKEN"]
	if cfg.JobID == "" {
		cfg.Input = inputs[0]
		f, err := os.Open(cfg.Input)
		if err != nil {
			return usageErr("%v", err)
		}
		warnings, err := batchcli.Credentials(f, cfg.Header, env["OPENAI_API_KEY"], env["ANTHROPIC_API_KEY"])
		f.Close()
		if err != nil {
			return usageErr("%s: %v", cfg.Input, err)
		}
		for _, w := range warnings {
			fmt.Fprintf(stderr, "governor batch: warning: %s\n", w)
		}
	}

	cfg.Stdin, cfg.Stdout, cfg.Stderr = stdin, stdout, stderr
	if f, ok := stdin.(*os.File); ok {
		cfg.StdinTerminal = isTerminal(f)
	}
	cfg.StderrTerminal = isTerminal(stderr)
	if cfg.StderrTerminal {
		cfg.StderrWidth = func() int { return terminalWidth(stderr) }
	}
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	defer signal.Stop(interrupt)
	cfg.Interrupt = interrupt
	return batchcli.Run(context.Background(), cfg)
}

// parseInterspersed parses args with fs and returns the arguments that
// are not flags. Flags may come after the input file as well as before
// it (governor batch in.jsonl -o out.jsonl); after "--" every argument
// is a file name.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var inputs []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return inputs, nil
		}
		if n := len(rest) - fs.NArg(); n > 0 && rest[n-1] == "--" {
			return append(inputs, fs.Args()...), nil
		}
		inputs = append(inputs, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// envMap turns KEY=value pairs into a map; a later pair wins.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
