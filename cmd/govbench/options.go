package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// options are govbench's flags.
type options struct {
	scenarios []string // in run order: see allScenarios
	smoke     bool
	out       string
	keep      bool

	governorBin string   // empty: build ./cmd/governor
	governorEnv []string // KEY=VALUE, given to every Governor last
	mockBin     string   // empty: build ./cmd/mockllm
	nginxBin    string   // empty: no nginx
	redisBin    string   // empty: no S4 with coordination

	concurrency      []int
	overheadDuration time.Duration
	overheadWarmup   time.Duration
	overheadRounds   int

	presets         []string
	goodputDuration time.Duration
	calls           int
	seed            int64
	timeoutFactor   float64

	memoryCalls int

	matrixCaps        []int
	matrixTokens      bool
	matrixLatencies   []time.Duration
	matrixKnees       []int
	matrixStreamKnees []int
	matrixRounds      int

	tenantsDuration time.Duration

	s4Latency  time.Duration // zero: the goodput scenarios' latency
	s4Variants []coordination

	bucketShareGovernors []int
	bucketShareLatencies []time.Duration
	bucketShareVariants  []coordination
	bucketShareBudgets   []shareBudget
	bucketShareDuration  time.Duration
}

// allScenarios is every scenario in the order govbench runs them.
var allScenarios = []string{"overhead", "s1", "s2", "s3", "s4", "s2shared", "memory", "tenants", "matrix"}

// smokeDefaults replace the defaults of flags not given on the command line
// when -smoke is set: every scenario runs, each in a second or two.
var smokeDefaults = map[string]string{
	"concurrency":        "16",
	"overhead-duration":  "300ms",
	"overhead-warmup":    "100ms",
	"overhead-rounds":    "1",
	"presets":            "default",
	"goodput-duration":   "1s",
	"calls":              "96",
	"memory-calls":       "500",
	"matrix-caps":        "2",
	"matrix-latencies":   "100ms",
	"matrix-knees":       "4",
	"matrix-rounds":      "8",
	"tenants-duration":   "1s",
	"s2shared-governors": "2",
	"s2shared-latencies": "100ms",
	"s2shared-duration":  "1s",
	"s2shared-variants":  "none", // S4 exercises Redis
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("govbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var scenarios, concurrency, presets string
	fs.StringVar(&scenarios, "scenarios", "overhead,goodput,memory,tenants", "scenarios to run: overhead, goodput (s1,s2,s3,s4,s2shared), s1, s2, s3, s4, s2shared, memory, tenants, matrix")
	fs.BoolVar(&o.smoke, "smoke", false, "a run of a few seconds that exercises every scenario (for CI; figures are meaningless)")
	fs.StringVar(&o.out, "out", "", "also write the Markdown report to this `file`")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (binaries, configs, process logs, each goodput run's lane samples as CSV)")
	fs.StringVar(&o.governorBin, "governor", "", "governor `binary` (default: build ./cmd/governor)")
	fs.StringVar(&o.mockBin, "mockllm", "", "mockllm `binary` (default: build ./cmd/mockllm)")
	fs.Func("governor-env", "a `GOVERNOR_KEY=value` setting for every Governor started, after govbench's own (repeat the flag for more; for experiments such as a controller constant)", func(v string) error {
		key, _, ok := strings.Cut(v, "=")
		if !ok || !strings.HasPrefix(key, "GOVERNOR_") {
			return errors.New("want GOVERNOR_KEY=value")
		}
		o.governorEnv = append(o.governorEnv, v)
		return nil
	})
	fs.StringVar(&o.nginxBin, "nginx", "nginx", "nginx `binary` for the overhead comparison; empty, or not found, skips nginx")
	fs.StringVar(&o.redisBin, "redis", "redis-server", "redis-server `binary` for S4 and S2 shared with coordination (GOVERNOR_REDIS_URL); empty, or not found, skips those rows")
	fs.StringVar(&concurrency, "concurrency", "1,16,64", "overhead: concurrent clients, comma-separated")
	fs.DurationVar(&o.overheadDuration, "overhead-duration", 2*time.Second, "overhead: measured time per target, level, mode and round")
	fs.DurationVar(&o.overheadWarmup, "overhead-warmup", 500*time.Millisecond, "overhead: unmeasured load before each measurement")
	fs.IntVar(&o.overheadRounds, "overhead-rounds", 3, "overhead: rounds; each measures every target once, in rotating order")
	fs.StringVar(&presets, "presets", "default,phoenix", "goodput: GOVERNOR_AIMD_PRESET values, comma-separated")
	fs.DurationVar(&o.goodputDuration, "goodput-duration", time.Minute, "goodput: optimum makespan of each scenario; the provider latency follows from it")
	fs.IntVar(&o.calls, "calls", 2000, "goodput: calls in S1 and S2 (S3 runs 1.5 times as many; S4 is bounded by time)")
	fs.Int64Var(&o.seed, "seed", 1, "mockllm -seed (latency draws), the same for every preset")
	fs.Float64Var(&o.timeoutFactor, "timeout-factor", 8, "goodput: a run is cut off after this many times its optimum (plus 10s)")
	fs.IntVar(&o.memoryCalls, "memory-calls", 10000, "memory: calls waiting in the lane")
	var matrixCaps, matrixLatencies, matrixKnees, matrixStreamKnees string
	fs.StringVar(&matrixCaps, "matrix-caps", "1,2,4,8,16,64,256", "matrix: provider concurrency caps, comma-separated, or none")
	fs.StringVar(&matrixLatencies, "matrix-latencies", "100ms,500ms,5s", "matrix: provider median latencies of the cap cells, comma-separated")
	fs.StringVar(&matrixKnees, "matrix-knees", "4,8,32", "matrix: knees of the servers that slow down instead of answering 429, comma-separated, or none")
	fs.StringVar(&matrixStreamKnees, "matrix-stream-knees", "none", "matrix: knees of the same servers, with every call streamed (SSE, 256 tokens at 500 a second after the first byte), comma-separated, or none")
	fs.BoolVar(&o.matrixTokens, "matrix-tokens", true, "matrix: run the token budget cells")
	fs.IntVar(&o.matrixRounds, "matrix-rounds", 30, "matrix: round trips (seconds, for the token budgets) of each cell at the optimum")
	fs.DurationVar(&o.tenantsDuration, "tenants-duration", 10*time.Second, "tenants: measured time of each run")
	fs.DurationVar(&o.s4Latency, "s4-latency", 0, "s4: the provider's median latency (default: the goodput scenarios', -goodput-duration over ⌈-calls/16⌉); e.g. 100ms for embeddings")
	var s4Variants string
	fs.StringVar(&s4Variants, "s4-variants", "none,redis,killed", "s4: the rows to run, comma-separated: none (each Governor alone, every preset), redis (coordinated, default preset), killed (redis killed mid-run)")
	var bsGovernors, bsLatencies, bsVariants, bsBudgets string
	fs.StringVar(&bsGovernors, "s2shared-governors", "2,4", "s2shared: how many Governor processes share the budget, comma-separated (64 clients in all, split evenly)")
	fs.StringVar(&bsLatencies, "s2shared-latencies", "100ms,480ms", "s2shared: the provider's median latencies of the request budget's cells, comma-separated")
	fs.StringVar(&bsBudgets, "s2shared-budgets", "requests,tpm", "s2shared: the budgets shared, comma-separated: requests (S2's request bucket, at each -s2shared-latencies), tpm (the matrix's OpenAI tokens-per-minute budget with its headers, calls of mixed sizes), tpm-noheaders (the same budget stated only in its 429s' messages)")
	fs.StringVar(&bsVariants, "s2shared-variants", "none,redis", "s2shared: the rows to run, comma-separated: none (each Governor alone, every preset), redis (coordinated, default preset)")
	fs.DurationVar(&o.bucketShareDuration, "s2shared-duration", 15*time.Second, "s2shared: how long the clients send calls in each run")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: govbench [flags]

Starts mockllm, Governor and nginx as real processes on loopback, runs the
benchmark scenarios and prints a Markdown report (see BENCHMARKS.md).
Run it from inside the Governor module unless -governor and -mockllm are given.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.smoke {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for name, v := range smokeDefaults {
			if !given[name] {
				if err := fs.Set(name, v); err != nil {
					panic(err) // the smoke defaults are constants that parse
				}
			}
		}
		concurrency, presets = fs.Lookup("concurrency").Value.String(), fs.Lookup("presets").Value.String()
	}
	var err error
	if o.scenarios, err = parseScenarios(scenarios); err != nil {
		return nil, fmt.Errorf("-scenarios: %w", err)
	}
	if o.concurrency, err = parseInts(concurrency); err != nil {
		return nil, fmt.Errorf("-concurrency: %w", err)
	}
	if o.matrixCaps, err = parseIntsOrNone(matrixCaps); err != nil {
		return nil, fmt.Errorf("-matrix-caps: %w", err)
	}
	if o.matrixKnees, err = parseIntsOrNone(matrixKnees); err != nil {
		return nil, fmt.Errorf("-matrix-knees: %w", err)
	}
	if o.matrixStreamKnees, err = parseIntsOrNone(matrixStreamKnees); err != nil {
		return nil, fmt.Errorf("-matrix-stream-knees: %w", err)
	}
	if o.matrixLatencies, err = parseDurations(matrixLatencies); err != nil {
		return nil, fmt.Errorf("-matrix-latencies: %w", err)
	}
	if o.matrixRounds < 1 {
		return nil, errors.New("-matrix-rounds must be at least 1")
	}
	if o.s4Variants, err = parseVariants(s4Variants); err != nil {
		return nil, fmt.Errorf("-s4-variants: %w", err)
	}
	if o.bucketShareGovernors, err = parseInts(bsGovernors); err != nil {
		return nil, fmt.Errorf("-s2shared-governors: %w", err)
	}
	if o.bucketShareLatencies, err = parseDurations(bsLatencies); err != nil {
		return nil, fmt.Errorf("-s2shared-latencies: %w", err)
	}
	if o.bucketShareVariants, err = parseVariants(bsVariants); err != nil {
		return nil, fmt.Errorf("-s2shared-variants: %w", err)
	}
	if o.bucketShareBudgets, err = parseShareBudgets(bsBudgets); err != nil {
		return nil, fmt.Errorf("-s2shared-budgets: %w", err)
	}
	if slices.Contains(o.bucketShareVariants, coordRedisKilled) {
		return nil, errors.New("-s2shared-variants: killed is S4's only (want none or redis)")
	}
	if g := o.bucketShareGovernors[len(o.bucketShareGovernors)-1]; g > bucketShareClients {
		return nil, fmt.Errorf("-s2shared-governors: %d is more than the %d clients", g, bucketShareClients)
	}
	o.presets = splitList(presets)
	for _, p := range o.presets {
		if p != "default" && p != "phoenix" {
			return nil, fmt.Errorf("-presets: unknown preset %q (want default or phoenix)", p)
		}
	}
	switch {
	case len(o.presets) == 0:
		return nil, errors.New("-presets: empty")
	case o.overheadDuration <= 0 || o.overheadWarmup < 0 || o.overheadRounds < 1:
		return nil, errors.New("-overhead-duration must be positive, -overhead-warmup not negative, -overhead-rounds at least 1")
	case o.goodputDuration <= 0:
		return nil, errors.New("-goodput-duration must be positive")
	case o.calls < 64:
		return nil, errors.New("-calls must be at least 64 (one per client)")
	case o.timeoutFactor < 1:
		return nil, errors.New("-timeout-factor must be at least 1")
	case o.memoryCalls < 2:
		return nil, errors.New("-memory-calls must be at least 2")
	case o.tenantsDuration <= 0:
		return nil, errors.New("-tenants-duration must be positive")
	case o.s4Latency < 0:
		return nil, errors.New("-s4-latency must not be negative")
	case o.bucketShareDuration <= 0:
		return nil, errors.New("-s2shared-duration must be positive")
	}
	return o, nil
}

// parseScenarios expands and orders a scenario list.
func parseScenarios(s string) ([]string, error) {
	want := map[string]bool{}
	for _, name := range splitList(s) {
		switch name {
		case "goodput":
			for _, g := range []string{"s1", "s2", "s3", "s4", "s2shared"} {
				want[g] = true
			}
		case "overhead", "s1", "s2", "s3", "s4", "s2shared", "memory", "tenants", "matrix":
			want[name] = true
		default:
			return nil, fmt.Errorf("unknown scenario %q", name)
		}
	}
	if len(want) == 0 {
		return nil, errors.New("no scenario")
	}
	var out []string
	for _, name := range allScenarios {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

// parseVariants parses S4's coordination variants, in run order.
func parseVariants(s string) ([]coordination, error) {
	names := map[string]coordination{"none": coordNone, "redis": coordRedis, "killed": coordRedisKilled}
	want := map[coordination]bool{}
	for _, f := range splitList(s) {
		c, ok := names[f]
		if !ok {
			return nil, fmt.Errorf("unknown variant %q (want none, redis or killed)", f)
		}
		want[c] = true
	}
	if len(want) == 0 {
		return nil, errors.New("empty")
	}
	var out []coordination
	for _, c := range []coordination{coordNone, coordRedis, coordRedisKilled} {
		if want[c] {
			out = append(out, c)
		}
	}
	return out, nil
}

// parseDurations parses a list of positive durations, in the order given.
func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// parseIntsOrNone is parseInts, except that "none" is the empty list.
func parseIntsOrNone(s string) ([]int, error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	return parseInts(s)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
			out = append(out, f)
		}
	}
	return out
}
