package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // a scenario failed: a process did not start, crashed, …
	exitUsage  = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if spec := os.Getenv(floorProxyEnv); spec != "" {
		// govbench started itself as the overhead scenario's fasthttp floor.
		code := exitOK
		if err := serveFloorProxy(ctx, spec); err != nil {
			fmt.Fprintf(os.Stderr, "govbench: %v\n", err)
			code = exitFailed
		}
		stop()
		os.Exit(code)
	}
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the scenarios the flags select and prints the report of what
// ran, also after a failure or Ctrl-C. Progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "govbench: %v\n", err)
		return exitUsage
	}
	start := time.Now()
	w, err := newWorkspace(ctx, o, stderr)
	if err != nil {
		if w != nil {
			w.close(false, stderr)
		}
		fmt.Fprintf(stderr, "govbench: %v\n", err)
		return exitFailed
	}
	m := readMachine(ctx, w)
	var notes []string
	if w.nginxNote != "" && slices.Contains(o.scenarios, "overhead") {
		notes = append(notes, w.nginxNote)
		fmt.Fprintf(stderr, "govbench: %s\n", w.nginxNote)
	}
	if w.redisNote != "" && (slices.Contains(o.scenarios, "s4") || slices.Contains(o.scenarios, "s2shared")) {
		notes = append(notes, w.redisNote)
		fmt.Fprintf(stderr, "govbench: %s\n", w.redisNote)
	}
	defer adminClient.CloseIdleConnections()
	res := &results{}
	err = runScenarios(ctx, w, o, res, stderr)
	switch {
	case ctx.Err() != nil:
		notes = append(notes, "the run was interrupted: the scenario in progress is missing")
	case err != nil:
		notes = append(notes, "the run stopped early: "+firstLine(err.Error()))
	}

	var report bytes.Buffer
	writeReport(&report, m, o, args, res, notes, time.Since(start))
	stdout.Write(report.Bytes())
	code := exitOK
	if o.out != "" {
		if werr := os.WriteFile(o.out, report.Bytes(), 0o644); werr != nil {
			fmt.Fprintf(stderr, "govbench: -out: %v\n", werr)
			code = exitFailed
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "govbench: %v\n", err)
		code = exitFailed
	}
	// Keep the logs of a failed run: they are what explains it.
	w.close(o.keep || err != nil, stderr)
	return code
}

// runScenarios runs the selected scenarios in order and fills res; it
// stops at the first error.
func runScenarios(ctx context.Context, w *workspace, o *options, res *results, log io.Writer) error {
	specs := goodputSpecs(o)
	for _, name := range o.scenarios {
		switch name {
		case "overhead":
			r, err := runOverhead(ctx, w, o, log)
			if err != nil {
				return err
			}
			res.overhead = r
		case "s1", "s2", "s3":
			for _, p := range o.presets {
				r, err := runGoodput(ctx, w, o, specs[name], p, log)
				if err != nil {
					return err
				}
				res.goodput = append(res.goodput, r)
			}
		case "s4":
			type variant struct {
				preset string
				coord  coordination
			}
			var vs []variant
			for _, c := range o.s4Variants {
				switch {
				case c == coordNone:
					for _, p := range o.presets {
						vs = append(vs, variant{p, coordNone})
					}
				case w.redisBin != "" && slices.Contains(o.presets, "default"):
					vs = append(vs, variant{"default", c})
				}
			}
			for _, v := range vs {
				r, err := runShared(ctx, w, o, v.preset, v.coord, log)
				if err != nil {
					return err
				}
				res.goodput = append(res.goodput, r)
			}
		case "s2shared":
			r, err := runBucketShares(ctx, w, o, log)
			res.bucketShare = append(res.bucketShare, r...)
			if err != nil {
				return err
			}
		case "matrix":
			r, err := runMatrix(ctx, w, o, log)
			res.matrix = append(res.matrix, r...)
			if err != nil {
				return err
			}
		case "memory":
			r, err := runMemory(ctx, w, o, log)
			if err != nil {
				return err
			}
			res.memory = &r
		case "tenants":
			r, err := runTenants(ctx, w, o, log)
			if err != nil {
				return err
			}
			res.tenants = &r
		}
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
