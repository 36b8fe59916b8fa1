package mockllm

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config describes the simulated provider. The zero value is a provider that
// answers at once, without limits or faults.
type Config struct {
	// Latency is the median time before the answer, or before the first
	// chunk of a stream. Zero answers at once.
	Latency time.Duration
	// LatencySpread is the sigma of a lognormal distribution around Latency,
	// as a fraction: 0.2 spreads latencies by about 20%. Zero keeps the
	// latency fixed.
	LatencySpread float64
	// ChunkDelay is the pause between two events of a stream.
	ChunkDelay time.Duration
	// StreamChunks is the number of content chunks in a streamed answer.
	// Zero means 8.
	StreamChunks int
	// MaxConcurrency caps the requests being served at once; a request
	// beyond the cap gets 429 at once. Zero means no cap.
	MaxConcurrency int
	// Rate is the refill rate of a token bucket in requests per second; a
	// request that finds no token gets 429. Zero means no bucket.
	Rate float64
	// Burst is the size of the token bucket. Zero means max(1, Rate).
	Burst int
	// TokensPerMinute is a budget of tokens refilled continuously, a
	// minute's worth at most (OpenAI's TPM): each request costs its
	// prompt's tokens plus max_completion_tokens or max_tokens (else its
	// answer's length). Answers carry x-ratelimit-{limit,remaining,reset}-
	// tokens; a request that does not fit gets 429 whose message states
	// Limit, Used and Requested. Zero means no budget.
	TokensPerMinute int
	// InputTokensPerMinute and OutputTokensPerMinute are Anthropic's ITPM
	// and OTPM budgets: a request costs its prompt's tokens and its
	// max_tokens (else its answer's length), the output tokens it did not
	// use given back when its answer ends. Answers on /v1/messages carry
	// anthropic-ratelimit-{input-tokens,output-tokens,tokens}-*. Zero
	// means no budget.
	InputTokensPerMinute  int
	OutputTokensPerMinute int
	// TokenWindow is the time in which the token budgets refill whole:
	// each of TokensPerMinute, InputTokensPerMinute and
	// OutputTokensPerMinute is then the budget per TokenWindow, refilled
	// continuously, and the reset headers say when it is full again (24h
	// for a daily budget such as OpenAI's TPD, 1s for one per second).
	// Zero means a minute.
	TokenWindow time.Duration
	// NoRateLimitHeaders leaves out every x-ratelimit-* and
	// anthropic-ratelimit-* header, as providers and gateways that do not
	// publish their budgets do; 429s keep their retry hints.
	NoRateLimitHeaders bool
	// FillMaxTokens makes an answer exactly as long as the request's
	// max_completion_tokens or max_tokens, in usage and (up to 256 KiB) in
	// text, instead of a short echo of the prompt.
	FillMaxTokens bool
	// OutputTokensPerSecond is the speed of generation: an answer of n
	// output tokens takes n/OutputTokensPerSecond after its first byte
	// (a stream spreads its chunks over that time). Zero: at once.
	OutputTokensPerSecond float64
	// Knee simulates a server that queues instead of refusing (vLLM and
	// the like): it never answers 429 of its own, and beyond Knee requests
	// in flight every request takes (in flight / Knee)² times as long,
	// counted when it arrives. Zero means no knee.
	Knee int
	// Schedule changes the limits during a run. Each phase takes effect at
	// its offset from New (or from the last Reset) and replaces
	// MaxConcurrency, Rate and Burst, zero values included.
	Schedule []Phase
	// Faults are the probabilities of random faults.
	Faults Faults
	// Seed seeds the random numbers behind latency spread and faults. Zero
	// seeds from the clock. Answer bodies never depend on it.
	Seed int64
}

// Phase is one step of a capacity schedule. MaxConcurrency, Rate and Burst
// mean what they mean in Config.
type Phase struct {
	At             time.Duration
	MaxConcurrency int
	Rate           float64
	Burst          int
}

// Faults holds probabilities in [0, 1] of random faults; their sum is at most
// 1. One draw per admitted request picks at most one fault.
type Faults struct {
	// Error500 answers 500 (server_error) after the latency wait.
	Error500 float64
	// Overloaded529 answers 529 (overloaded_error) at once.
	Overloaded529 float64
	// Reset closes the connection with a TCP RST after the latency wait.
	Reset float64
	// Hang never answers, until the client goes away or the server closes.
	Hang float64
	// OverloadedMidStream ends a stream after half of its events with
	// the error event the provider sends when it is overloaded once an
	// answer has begun (see the overload-mid-stream fault); a JSON answer
	// gets the provider's overload status instead, after the latency
	// wait.
	OverloadedMidStream float64
}

// Limits are the capacity limits in force at one moment.
type Limits struct {
	MaxConcurrency int     `json:"max_concurrency"`
	Rate           float64 `json:"rate"`
	Burst          int     `json:"burst"`
}

const (
	defaultStreamChunks = 8
	maxStreamChunks     = 100_000
)

// Validate reports the first setting that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Latency < 0:
		return errors.New("mockllm: Latency is negative")
	case c.LatencySpread < 0:
		return errors.New("mockllm: LatencySpread is negative")
	case c.ChunkDelay < 0:
		return errors.New("mockllm: ChunkDelay is negative")
	case c.StreamChunks < 0 || c.StreamChunks > maxStreamChunks:
		return fmt.Errorf("mockllm: StreamChunks %d is outside [0, %d]", c.StreamChunks, maxStreamChunks)
	case c.TokensPerMinute < 0 || c.InputTokensPerMinute < 0 || c.OutputTokensPerMinute < 0:
		return errors.New("mockllm: a tokens-per-minute budget is negative")
	case c.TokenWindow < 0:
		return errors.New("mockllm: TokenWindow is negative")
	case !(c.OutputTokensPerSecond >= 0) || math.IsInf(c.OutputTokensPerSecond, 0):
		return fmt.Errorf("mockllm: OutputTokensPerSecond %v is out of range", c.OutputTokensPerSecond)
	case c.Knee < 0:
		return errors.New("mockllm: Knee is negative")
	}
	if err := validateLimits(c.MaxConcurrency, c.Rate, c.Burst); err != nil {
		return fmt.Errorf("mockllm: %w", err)
	}
	for i, p := range c.Schedule {
		if p.At < 0 {
			return fmt.Errorf("mockllm: schedule phase %d: negative offset", i)
		}
		if err := validateLimits(p.MaxConcurrency, p.Rate, p.Burst); err != nil {
			return fmt.Errorf("mockllm: schedule phase %d: %w", i, err)
		}
	}
	f := c.Faults
	sum := 0.0
	for _, p := range []struct {
		name string
		v    float64
	}{{"Error500", f.Error500}, {"Overloaded529", f.Overloaded529}, {"Reset", f.Reset}, {"Hang", f.Hang}, {"OverloadedMidStream", f.OverloadedMidStream}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("mockllm: fault probability %s=%v is outside [0, 1]", p.name, p.v)
		}
		sum += p.v
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("mockllm: fault probabilities add up to %v, more than 1", sum)
	}
	return nil
}

func validateLimits(maxConcurrency int, rate float64, burst int) error {
	switch {
	case maxConcurrency < 0:
		return errors.New("max concurrency is negative")
	case !(rate >= 0) || rate > 1e9:
		return fmt.Errorf("rate %v is out of range", rate)
	case burst < 0:
		return errors.New("burst is negative")
	}
	return nil
}

// ParseSchedule parses the command-line form of a schedule: entries
// separated by commas, each an offset followed by colon-separated settings,
// as in "20s:cap=8,40s:cap=32:rate=50:burst=10". The keys are cap (alias
// max-concurrency), rate and burst; 0 removes a limit. A key that an entry
// omits keeps its value from the entry before, the first entry starting from
// base (the Config's own limits). Offsets must increase.
func ParseSchedule(s string, base Limits) ([]Phase, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var phases []Phase
	cur := base
	for i, entry := range strings.Split(s, ",") {
		p, err := parsePhase(strings.TrimSpace(entry), cur)
		if err != nil {
			return nil, fmt.Errorf("schedule entry %d %q: %w", i+1, entry, err)
		}
		if len(phases) > 0 && p.At <= phases[len(phases)-1].At {
			return nil, fmt.Errorf("schedule entry %d %q: offset %v does not come after %v", i+1, entry, p.At, phases[len(phases)-1].At)
		}
		phases = append(phases, p)
		cur = Limits{MaxConcurrency: p.MaxConcurrency, Rate: p.Rate, Burst: p.Burst}
	}
	return phases, nil
}

func parsePhase(entry string, cur Limits) (Phase, error) {
	parts := strings.Split(entry, ":")
	at, err := time.ParseDuration(strings.TrimSpace(parts[0]))
	if err != nil {
		return Phase{}, fmt.Errorf("bad offset: %w", err)
	}
	if at < 0 {
		return Phase{}, errors.New("negative offset")
	}
	if len(parts) == 1 {
		return Phase{}, errors.New("no settings: want OFFSET:key=value[:key=value]")
	}
	p := Phase{At: at, MaxConcurrency: cur.MaxConcurrency, Rate: cur.Rate, Burst: cur.Burst}
	for _, kv := range parts[1:] {
		key, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Phase{}, fmt.Errorf("setting %q: want key=value", kv)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "cap", "max-concurrency":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return Phase{}, fmt.Errorf("setting %q: want a whole number >= 0", kv)
			}
			p.MaxConcurrency = n
		case "rate":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || validateLimits(0, f, 0) != nil {
				return Phase{}, fmt.Errorf("setting %q: want a number >= 0", kv)
			}
			p.Rate = f
		case "burst":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return Phase{}, fmt.Errorf("setting %q: want a whole number >= 0", kv)
			}
			p.Burst = n
		default:
			return Phase{}, fmt.Errorf("setting %q: unknown key (want cap, rate or burst)", kv)
		}
	}
	return p, nil
}

// sortedSchedule returns a copy of the schedule ordered by offset.
func sortedSchedule(s []Phase) []Phase {
	s = slices.Clone(s)
	slices.SortStableFunc(s, func(a, b Phase) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return s
}
