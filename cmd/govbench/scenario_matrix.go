package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// The matrix: one Governor in front of providers that limit the way real
// ones do, each cell a goodput run (runGoodput) with its own goal.
//
//   - cap C at latency L: a hard concurrency cap, for every C of
//     -matrix-caps and L of -matrix-latencies; max(64, 2C) clients, so
//     that the cap binds, and GOVERNOR_MAX_CONCURRENCY=2C above 64.
//   - TPM: a tokens-per-minute budget that binds, calls of mixed sizes
//     (prompts of 200, 2,000 and 8,000 bytes; max_tokens 64, 256 and 512,
//     answers that long at 500 tokens a second after 200 ms): OpenAI's
//     shape with its x-ratelimit-*-tokens headers and without them, and
//     Anthropic's output-tokens budget with its headers.
//   - knee K: a server that never answers 429 but slows every call by (in
//     flight / K)² beyond K (vLLM-like), 10 s attempt timeout. Its goal is
//     a share of running at the knee: the same calls sent straight to the
//     same server by K clients, measured in the same run (runReference).
//     -matrix-stream-knees runs the same servers with every call an SSE
//     stream of 256 tokens at 500 a second after its first byte, so that a
//     call's latency to its end is about twice that to its first byte.
//
// Each cell runs -matrix-rounds round trips at the optimum.

// matrixSpec is one cell of the matrix.
type matrixSpec struct {
	goodputSpec
	goal matrixGoal
	// reference, when above 0, is the calls in flight of the cell's
	// reference run (runReference), whose makespan the goal's goodput is
	// measured against instead of the optimum.
	reference int
}

// matrixGoal is what a cell must reach with the default preset.
type matrixGoal struct {
	goodput float64 // of the optimum
	per100  float64 // upstream 429s per 100 calls
}

// The sizes of the TPM cells' calls, cycled through by call index.
var (
	matrixPrompts   = []int{200, 2000, 8000} // bytes of prompt
	matrixMaxTokens = []int{64, 256, 512}
)

const (
	matrixTokenLatency = 200 * time.Millisecond // first byte of a TPM cell's answer
	matrixTokenSpeed   = 500                    // output tokens a second
	matrixKneeLatency  = 500 * time.Millisecond
	matrixKneeTimeout  = 10 * time.Second
)

// matrixCost is the mean cost of a TPM cell's call as mockllm counts it:
// prompt tokens (about a quarter of the bytes) plus max_tokens.
func matrixCost() float64 {
	var sum float64
	for i := range matrixPrompts {
		sum += float64(matrixPrompts[i]+8)/4 + float64(matrixMaxTokens[i])
	}
	return sum / float64(len(matrixPrompts))
}

// matrixTokenRate is the TPM cells' budget in calls a second.
const matrixTokenRate = 4.0

// matrixTPM is the TPM cells' OpenAI budget, tokens a minute:
// matrixTokenRate calls of the mean cost a second.
func matrixTPM() int { return int(matrixTokenRate * matrixCost() * 60) }

// matrixTokenMeanLatency is a TPM cell's mean call, first byte to last.
func matrixTokenMeanLatency() time.Duration {
	return matrixTokenLatency + time.Duration(float64(matrixMaxTokens[0]+matrixMaxTokens[1]+matrixMaxTokens[2])/3/matrixTokenSpeed*float64(time.Second))
}

// matrixBody returns call i's body of a TPM cell.
func matrixBody(anthropic bool) func(i int) []byte {
	return func(i int) []byte {
		k := i % len(matrixPrompts)
		prompt := strings.Repeat("abcd", matrixPrompts[k]/4)
		model := "gpt-4o-mini"
		if anthropic {
			model = "claude-haiku-4-5"
		}
		return fmt.Appendf(nil, `{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, model, matrixMaxTokens[k], prompt)
	}
}

// matrixSpecs returns the cells of the matrix for o.
func matrixSpecs(o *options) []matrixSpec {
	var out []matrixSpec
	rounds := o.matrixRounds
	for _, l := range o.matrixLatencies {
		for _, c := range o.matrixCaps {
			n := max(rounds*c, 64)
			s := matrixSpec{goal: matrixGoal{goodput: 0.95, per100: 2}}
			s.name = fmt.Sprintf("cap%d-%v", c, l)
			s.title = fmt.Sprintf("cap %d, %v", c, l)
			s.calls, s.clients = n, max(goodputClients, 2*c)
			s.mock = mockConfig{latency: l, spread: latencySpread, seed: o.seed, maxConcurrency: c}
			s.optimum = optimumCap(n, c, l)
			s.changes = []capChange{{at: 0, capacity: float64(c), label: "start"}}
			if c > 64 {
				// A lane's limit stops at GOVERNOR_MAX_CONCURRENCY (64):
				// an account that takes more is told so, as a user would.
				s.env = []string{fmt.Sprintf("GOVERNOR_MAX_CONCURRENCY=%d", 2*c)}
			}
			out = append(out, s)
		}
	}

	// TPM cells: a budget of 4 calls a second (a minute's worth at the
	// start); each call takes 0.2 s + max_tokens/500 s (0.75 s on
	// average), so 64 clients would send 85 a second. The calls are the
	// minute's worth and -matrix-rounds seconds at the budget's rate.
	perSecond, tpm := matrixTokenRate, matrixTPM()
	burst := int(perSecond * 60)
	n := burst + int(perSecond*float64(rounds))
	meanLatency := matrixTokenMeanLatency()
	token := func(name, title string, anthropic, headers bool) matrixSpec {
		s := matrixSpec{goal: matrixGoal{goodput: 0.95, per100: 3}}
		if headers {
			s.goal.per100 = 1
		}
		s.name, s.title, s.calls = name, title, n
		s.mock = mockConfig{latency: matrixTokenLatency, spread: latencySpread, seed: o.seed,
			fill: true, tokensPerSecond: matrixTokenSpeed, noHeaders: !headers}
		s.path = func(int) string { return "/v1/chat/completions" }
		if anthropic {
			s.mock.otpm = int(perSecond * 60 * float64(matrixMaxTokens[0]+matrixMaxTokens[1]+matrixMaxTokens[2]) / 3)
			s.path = func(int) string { return "/v1/messages" }
		} else {
			s.mock.tpm = tpm
		}
		s.body = matrixBody(anthropic)
		// (The optimum lets the first minute's worth go at once; 64
		// clients take about 3 s to send it, which the goodput pays.)
		s.optimum = optimumBucket(n, burst, perSecond, meanLatency)
		return s
	}
	if o.matrixTokens {
		out = append(out,
			token("tpm-openai", "TPM, OpenAI, headers", false, true),
			token("tpm-openai-noheaders", "TPM, OpenAI, no headers", false, false),
			token("otpm-anthropic", "output TPM, Anthropic, headers", true, true),
		)
	}

	for _, k := range o.matrixKnees {
		s := matrixSpec{goal: matrixGoal{goodput: 0.90, per100: 2}, reference: k}
		s.name, s.title = fmt.Sprintf("knee%d", k), fmt.Sprintf("knee %d (no 429s)", k)
		s.calls = max(rounds*k, 64)
		s.mock = mockConfig{latency: matrixKneeLatency, spread: latencySpread, seed: o.seed, knee: k}
		s.optimum = optimumCap(s.calls, k, matrixKneeLatency)
		s.env = []string{"GOVERNOR_ATTEMPT_TIMEOUT=" + matrixKneeTimeout.String()}
		out = append(out, s)
	}
	for _, k := range o.matrixStreamKnees {
		s := matrixSpec{goal: matrixGoal{goodput: 0.90, per100: 2}, reference: k}
		s.name, s.title = fmt.Sprintf("knee%d-stream", k), fmt.Sprintf("knee %d, streamed (no 429s)", k)
		s.calls = max(rounds*k, 64)
		s.mock = mockConfig{latency: matrixKneeLatency, spread: latencySpread, seed: o.seed, knee: k,
			fill: true, tokensPerSecond: matrixTokenSpeed}
		s.body = func(int) []byte { return matrixStreamBody }
		s.optimum = optimumCap(s.calls, k, matrixKneeLatency+matrixStreamTokens*time.Second/matrixTokenSpeed)
		s.env = []string{"GOVERNOR_ATTEMPT_TIMEOUT=" + matrixKneeTimeout.String()}
		out = append(out, s)
	}
	return out
}

// matrixStreamTokens is the length of a streamed knee cell's answer.
const matrixStreamTokens = 256

// matrixStreamBody is every call of a streamed knee cell: an SSE stream of
// matrixStreamTokens tokens, whose outcome and latency Governor hears at
// its end.
var matrixStreamBody = fmt.Appendf(nil, `{"model":"gpt-4o-mini","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"Say hello."}]}`, matrixStreamTokens)

// matrixRun is one cell's run with one preset.
type matrixRun struct {
	goodputRun
	goal matrixGoal
	// reference is the makespan of the cell's reference run; 0 for a cell
	// judged against its optimum.
	reference time.Duration
}

// score is the goodput the cell's goal is judged on: reference / makespan
// for a cell with a reference run, optimum / makespan otherwise.
func (r matrixRun) score() float64 {
	if r.reference <= 0 {
		return r.goodput()
	}
	if r.makespan <= 0 {
		return 0
	}
	return float64(r.reference) / float64(r.makespan)
}

// met reports whether the run meets its cell's goal, and what it misses.
func (r matrixRun) met() (bool, string) {
	var miss []string
	if r.score() < r.goal.goodput {
		miss = append(miss, fmt.Sprintf("goodput < %.2f", r.goal.goodput))
	}
	if r.tally.per100() > r.goal.per100 {
		miss = append(miss, fmt.Sprintf("429s > %g", r.goal.per100))
	}
	if r.tally.lost > 0 || r.tally.duplicated > 0 {
		miss = append(miss, "lost or duplicated")
	}
	if r.tally.unfinished > 0 {
		miss = append(miss, "cut off")
	}
	return len(miss) == 0, strings.Join(miss, ", ")
}

// runMatrix runs every cell with every preset.
func runMatrix(ctx context.Context, w *workspace, o *options, log io.Writer) ([]matrixRun, error) {
	var out []matrixRun
	for _, s := range matrixSpecs(o) {
		var ref time.Duration
		if s.reference > 0 {
			var err error
			if ref, err = runReference(ctx, w, o, s.goodputSpec, s.reference, log); err != nil {
				return out, err
			}
		}
		for _, p := range o.presets {
			r, err := runGoodput(ctx, w, o, s.goodputSpec, p, log)
			if err != nil {
				return out, err
			}
			out = append(out, matrixRun{r, s.goal, ref})
		}
	}
	return out, nil
}

// writeMatrix writes the matrix's table.
func writeMatrix(w io.Writer, runs []matrixRun) {
	t := table{
		header: []string{"cell", "preset", "calls", "optimum", "makespan", "goodput", "running at the knee: makespan, goodput", "lost", "duplicated", "429s/100 calls", "decreases / collapses / pauses", "goal (default)"},
		align:  "llrrrrrrrrrl",
	}
	for _, r := range runs {
		makespan, good, ref := secs(r.makespan), fmt.Sprintf("%.3f", r.goodput()), "–"
		if r.reference > 0 {
			ref = fmt.Sprintf("%s, %.3f", secs(r.reference), r.score())
		}
		if r.cutOff {
			makespan, good = "> "+makespan, "< "+good
			if r.reference > 0 {
				ref = fmt.Sprintf("%s, < %.3f", secs(r.reference), r.score())
			}
		}
		goal := fmt.Sprintf("≥ %.2f, ≤ %g per 100", r.goal.goodput, r.goal.per100)
		if r.reference > 0 {
			goal = fmt.Sprintf("≥ %.2f of running at the knee, ≤ %g per 100", r.goal.goodput, r.goal.per100)
		}
		if r.preset == "default" {
			if ok, miss := r.met(); ok {
				goal += ": met"
			} else {
				goal += ": **missed** (" + miss + ")"
			}
		}
		t.add(r.title, r.preset, r.tally.callsText(), secs(r.optimum), makespan, good, ref,
			r.tally.lostText(), fmt.Sprint(r.tally.duplicated), fmt.Sprintf("%.2f", r.tally.per100()), r.events.String(), goal)
	}
	fmt.Fprintf(w, "\n## Matrix\n\n%s", t.markdown())
}
