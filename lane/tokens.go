package lane

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Token budgets. Providers limit the tokens an account may use per minute
// (or per day, or per second) as well as its requests: OpenAI's TPM
// (prompt plus max_tokens, counted when a call arrives), Anthropic's input
// and output tokens per minute. A lane learns each budget from what the
// provider reports (TokenReport, from its headers or from the numbers of
// a 429) and spends it by each call's estimated cost (Cost), so that the
// budget is met by waiting in Governor rather than by collecting 429s. It
// spends a budget at its refill rate, keeping tokenSlack of it unspent:
// limit/60 a second, as for a per-minute budget, unless the resets the
// reports give say otherwise (see tokenBucket.learnRefill). Its
// estimate is its own count of the refill and of the calls it booked;
// each report bounds it by what the budget can be, the provider having
// counted the call at some instant between its dispatch and its answer
// (ObserveTokens), and each answer's usage corrects its call's cost
// (ObserveUsage). Of each budget it counts only its share, which others
// spending the same budget make smaller: see share and TokensRefused.

// TokenKind names one of a provider's token budgets.
type TokenKind uint8

const (
	// Tokens is a budget of prompt and output tokens together: OpenAI's
	// x-ratelimit-*-tokens, Anthropic's anthropic-ratelimit-tokens-*.
	Tokens TokenKind = iota
	// InputTokens is Anthropic's anthropic-ratelimit-input-tokens-*.
	InputTokens
	// OutputTokens is Anthropic's anthropic-ratelimit-output-tokens-*.
	OutputTokens
	numTokenKinds
)

var tokenKindNames = [...]string{"tokens", "input_tokens", "output_tokens"}

func (k TokenKind) String() string { return tokenKindNames[k] }

// Cost is what a call is expected to cost the token budgets.
type Cost struct {
	Prompt int // estimated prompt tokens
	Output int // the most output tokens it may use (its max_tokens), or an estimate

	// estimated is set on a cost from EstimateCost, whose prompt (and
	// output, without max_tokens) is a guess from what the lane's
	// answers have shown; least is then the part of it that no answer
	// can have made larger, which alone may refuse a call (see sure).
	estimated bool
	least     struct{ prompt, output int }
}

func (c Cost) of(k TokenKind) float64 {
	switch k {
	case InputTokens:
		return float64(c.Prompt)
	case OutputTokens:
		return float64(c.Output)
	}
	return float64(c.Prompt + c.Output)
}

// sure returns what the call costs for certain enough to refuse it when
// it is more than a whole budget: a cost given as such, or of an
// estimate, its prompt at no fewer bytes a token than the rule of thumb
// (the lane's ratio if it shows more bytes a token) and its max_tokens.
// A lane's ratio is learned from answers: one that reports a prompt far
// beyond its body's text (an image or a file sent by reference is many
// tokens in a few bytes, a provider may count wrong) must never make the
// next large prompts look as if they could not run.
func (c Cost) sure() Cost {
	if !c.estimated {
		return c
	}
	return Cost{Prompt: c.least.prompt, Output: c.least.output}
}

// TokenReport is what an answer says of one token budget: a bucket of
// Limit tokens, Remaining of them left after the call that got it (up to
// RemainingError more: what the provider's rounding hides), full again
// Reset later, give or take ResetError (0: not reported). A budget whose
// reset is not reported is taken as one per minute.
type TokenReport struct {
	Kind           TokenKind
	Limit          float64
	Remaining      float64
	RemainingError float64
	Reset          time.Duration
	ResetError     time.Duration
}

// Valid reports whether r holds numbers a budget can have (a Limit up to
// MaxBudget).
func (r TokenReport) Valid() bool {
	return r.Kind < numTokenKinds && r.Limit > 0 && r.Limit <= MaxBudget && r.Remaining >= 0 &&
		r.RemainingError >= 0 && !math.IsInf(r.RemainingError, 0) && r.Reset >= 0 && r.ResetError >= 0
}

// ErrCostExceedsBudget is the error of a call that costs more tokens than
// a whole budget of its lane: no wait can make it fit.
var ErrCostExceedsBudget = errors.New("call costs more tokens than the whole budget")

// TokenBudgetInfo is one token budget as GET /governor/lanes shows it: its
// refill a minute (the budget itself for a per-minute one, 1/1440 of it
// for a daily one), its size (Limit), the share of both the lane takes as
// its own (1 unless its calls were refused for want of it, as when other
// Governors spend the same budget, see TokensRefused, or it is coordinated
// with other Governors, see Coordinator), and the estimate of what is left
// of that share now.
type TokenBudgetInfo struct {
	Kind      string  `json:"kind"`
	PerMinute float64 `json:"per_minute"`
	Limit     float64 `json:"limit"`
	Share     float64 `json:"share"`
	Remaining float64 `json:"remaining"`
}

// tokenBucket is one token budget: the lane's count of its share of it,
// whose capacity is share of the budget and whose rate share of its refill
// rate (providers' budgets are buckets that refill continuously).
type tokenBucket struct {
	bucket
	limit float64 // the budget's size, as last reported; 0 = unknown
	// reported is when the size was last reported: only for limitMemory
	// after does it refuse a call at once (see reserve).
	reported time.Time
	// refill is the whole budget's refill a minute (see learnRefill);
	// lows and ups keep the largest lower bound and the smallest upper
	// bound on it that the reports' resets set lately.
	refill    float64
	lows, ups extreme
	share     share   // its bookings are spent
	spent     float64 // every cost booked so far, for TokenMark
	// blindTo is spent when the budget became known: the calls booked
	// up to it were not booked on it.
	blindTo float64
}

// resize sets the count's capacity and rate to its share of the budget,
// at now, the count so far refilled at the old ones.
func (b *tokenBucket) resize(now time.Time) {
	b.bucket.resize(b.share.of*b.limit, b.share.of*b.refill/60, now)
}

// learnRefill sets the budget's refill rate from report r at now. A
// report that says when the budget is full again bounds the rate: what it
// used, limit less remaining, refills in reset, both within the report's
// rounding. The rate is the limit a minute, as for the per-minute budgets
// that providers mostly set, unless the bounds reported lately exclude it:
// then the lower bound (the upper while there is none below it), which
// errs on the side of fewer 429s. So a per-minute budget is paced as one
// whatever its resets' rounding, a daily one refills in a day and a
// per-second one in a second, once a report's reset is precise enough to
// tell (a budget that is full says nothing of its rate). Bounds that cross
// (the budget changed) give the lower rate.
func (b *tokenBucket) learnRefill(r TokenReport, now time.Time) {
	if r.Reset > 0 {
		used := r.Limit - min(r.Remaining, r.Limit)
		if lo := (used - r.RemainingError) / (r.Reset + r.ResetError).Minutes(); lo > 0 {
			b.lows.add(lo, now, math.Max)
		}
		if d := r.Reset - r.ResetError; d > 0 && used > 0 {
			b.ups.add(used/d.Minutes(), now, math.Min)
		}
	}
	rate := r.Limit
	lo, up := b.lows.get(now, math.Max), b.ups.get(now, math.Min)
	switch {
	case up > 0 && rate > up:
		// Slower than a minute: the lower bound, which errs on the side
		// of fewer 429s, once there is one below the upper.
		rate = up
		if lo > 0 && lo < up {
			rate = lo
		}
	case lo > 0 && rate < lo:
		rate = lo
	}
	b.refill = rate
}

// TokenMark is where a call's booking stands among the lane's bookings:
// a budget its answer reports has been charged for it and for the calls
// booked before it, not for those booked after. The zero TokenMark is
// that of a call booked nowhere (no budget was known when it went): its
// report is taken as is.
type TokenMark [numTokenKinds]float64

func (b *tokenBucket) known() bool { return b.limit > 0 }

// tokenPacer spends a lane's token budgets.
type tokenPacer struct {
	mu      sync.Mutex
	buckets [numTokenKinds]tokenBucket
	// bodyBytes and promptTokens are the means of the answered calls'
	// body sizes and prompt tokens (0 until one reports usage): the
	// prompt tokens a body of n bytes holds are about
	// n*promptTokens/bodyBytes.
	bodyBytes, promptTokens float64
	// output is the mean output tokens of the lane's answers, the
	// estimate for a call that sets no max_tokens (0 until one answers).
	output float64
	// fastest is the shortest time from dispatch to answer of the calls
	// that reported a budget within fastestMemory of fastestAt (0: none).
	fastest   time.Duration
	fastestAt time.Time
	// spenders is the number of Governors that spend the lane's budgets,
	// this one included, as coordination last said (0: unknown, alone).
	spenders int
}

// fastestMemory is how long the shortest answer time stands, so that it
// follows a provider (or a network) that slows down.
const fastestMemory = 10 * time.Second

// tokenSlack is the share of a token budget the pacer leaves unspent.
// With many calls in flight, answers report the budget out of the order
// the calls were booked in: a call booked before the reported one but
// counted by the provider after it is in neither the report nor the
// bookings since, and the estimate can run a call or two ahead; estimates
// of prompt tokens err by a few percent too. The slack costs the first
// minute that share of its budget, and nothing after: once the lane waits
// for the refill it spends the refill rate. BENCHMARKS.md has the figures
// behind the 1%. Of a budget that refills more slowly than in a minute (a
// daily one) the slack is that share of a minute's refill: what errs by a
// call or two is not the budget's size.
const tokenSlack = 0.01

// slack returns the tokens the pacer leaves unspent in b (see tokenSlack).
func (b *tokenBucket) slack() float64 { return tokenSlack * min(b.capacity, b.share.of*b.refill) }

// defaultBytesPerToken is the usual rule of thumb: about four bytes a
// token of English text (a body's JSON around the prompt adds some).
const defaultBytesPerToken = 4

// usageWeight is the weight of one answer's usage in the lane's
// estimates.
const usageWeight = 0.1

// limitMemory is how long a budget's reported size refuses the calls
// that surely cost more than all of it. A budget grows (OpenAI raises an
// account's limits as it moves up a usage tier) and refused calls report
// nothing: past it, such a call is sent, after waiting for the budget as
// long as Config.MaxPause allows, and its answer says the size again
// (the provider's "Request too large" 429 if it has not grown). So a lane
// whose calls are all large learns a larger budget within a minute or
// so, at the cost of at most one refused call a minute at the provider.
const limitMemory = time.Minute

// maxAnswerTokens bounds the tokens one answer's usage counts toward the
// lane's estimates while it knows no budget: about five times the longest
// context windows of 2026, so that a count no call can reach (a usage of
// 2^53 tokens) sets no estimate that a budget learned later cannot hold.
const maxAnswerTokens = 10_000_000

// estimate returns the cost of a call whose body has bodyBytes bytes and
// that may use at most maxTokens output tokens (0: not set).
func (p *tokenPacer) estimate(bodyBytes, maxTokens int) Cost {
	p.mu.Lock()
	defer p.mu.Unlock()
	bpt := float64(defaultBytesPerToken)
	if p.promptTokens > 0 {
		bpt = p.bodyBytes / p.promptTokens
	}
	c := Cost{Prompt: int(math.Ceil(float64(bodyBytes) / bpt)), Output: maxTokens, estimated: true}
	c.least.prompt = int(math.Ceil(float64(bodyBytes) / max(bpt, defaultBytesPerToken)))
	if maxTokens <= 0 {
		c.Output = int(math.Ceil(p.output))
	} else {
		c.least.output = maxTokens
	}
	return c
}

// reserve books cost on every known budget at now and returns how long the
// call must wait before it is sent and its mark, or ErrCostExceedsBudget.
func (p *tokenPacer) reserve(cost Cost, now time.Time, maxWait time.Duration) (time.Duration, TokenMark, error) {
	var mark TokenMark
	p.mu.Lock()
	defer p.mu.Unlock()
	if maxWait <= 0 {
		maxWait = maxDelay
	}
	var wait time.Duration
	for k := range p.buckets {
		b := &p.buckets[k]
		if !b.known() {
			continue
		}
		if c := cost.sure().of(TokenKind(k)); c > b.limit && now.Sub(b.reported) < limitMemory {
			return 0, mark, fmt.Errorf("%w: about %.0f %s, the whole budget is %.0f", ErrCostExceedsBudget, c, TokenKind(k), b.limit)
		}
		c := cost.of(TokenKind(k))
		// Spend at the refill rate, keeping tokenSlack of the budget
		// unspent (see there). Unlike the request pacer's, the rate is
		// no guess at the rounding of a count (it is the limit's
		// sixtieth, or what resets say), and a call that
		// reaches the provider later than planned finds more tokens,
		// not fewer: spending less than the rate would only lose it. (A
		// call that costs more than the lane's share waits maxWait.)
		lvl := b.level(now) - b.slack()
		if lvl < c {
			w := time.Duration((c - lvl) / b.rate * float64(time.Second))
			wait = max(wait, min(w, maxWait))
		}
	}
	// Book the call once the longest wait is over: later calls queue
	// behind it.
	for k := range p.buckets {
		b := &p.buckets[k]
		b.spent += cost.of(TokenKind(k))
		mark[k] = b.spent
		if b.known() {
			b.take(cost.of(TokenKind(k)), now)
		}
	}
	return wait, mark, nil
}

// behind returns how much longer the call booked at mark must wait at
// now, as the request pacer's behind: on each known budget, the count
// with the costs booked after mark taken back must hold tokenSlack of it
// (the call's own cost was booked at mark). A share cut since, or a
// report of a budget lower than the count, moves the call back; it never
// goes earlier than it was told, nor waits more than maxWait since booked.
func (p *tokenPacer) behind(mark TokenMark, booked, now time.Time, maxWait time.Duration) time.Duration {
	if mark == (TokenMark{}) {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if maxWait <= 0 {
		maxWait = maxDelay
	}
	left := maxWait - now.Sub(booked)
	var wait time.Duration
	for k := range p.buckets {
		b := &p.buckets[k]
		if !b.known() || mark[k] <= b.blindTo {
			continue
		}
		missing := b.slack() - (b.level(now) + max(0, b.spent-mark[k]))
		if missing > 0 {
			wait = max(wait, time.Duration(missing/b.rate*float64(time.Second)))
		}
	}
	return max(0, min(wait, left))
}

// observe takes a budget reported by the answer, at answered, to the
// call booked at mark and dispatched at dispatched: what remained when the
// provider counted the call, less what the calls booked since are to cost,
// bounds the lane's count (see bucket.bound and ObserveTokens).
func (p *tokenPacer) observe(r TokenReport, mark TokenMark, dispatched, answered time.Time) {
	if !r.Valid() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	counted := p.countedLocked(dispatched, answered)
	b := &p.buckets[r.Kind]
	since := 0.0
	if mark != (TokenMark{}) {
		since = math.Max(0, b.spent-mark[r.Kind])
	}
	remaining := math.Min(r.Remaining, r.Limit)
	b.reported = answered
	if !b.known() {
		b.limit = r.Limit
		b.learnRefill(r, answered)
		b.share.start(answered)
		b.share.scale(1 / float64(max(1, p.spenders)))
		// The calls booked so far went out blind: their refusals
		// cut nothing, as those of calls sent before a cut.
		b.blindTo = b.spent
		b.bucket = bucket{capacity: b.share.of * r.Limit, rate: b.share.of * b.refill / 60, tokens: b.share.of*remaining - since, at: counted}
		return
	}
	// The count so far refilled at the share and rate it had; the report
	// is read with the share and rate it has now.
	b.limit = r.Limit
	b.learnRefill(r, answered)
	b.share.grow(answered, remaining > tokenSlack*min(r.Limit, b.refill))
	b.resize(answered)
	b.bound(b.share.of*remaining-since, counted, answered, b.capacity, b.rate)
}

// setSpenders takes, at now, the number n of Governors that spend the
// lane's token budgets, this one included: the live members of a
// coordinated lane. A budget learned from then on starts at a share of 1/n
// instead of the whole; a known budget's share is scaled by the number
// before over n, so that a Governor that joins takes its part from each
// share, and one that leaves gives its part back. (Shares still move by
// the refusals and reports of room, for demands that differ and for
// spenders that coordination does not count.)
func (p *tokenPacer) setSpenders(n int, now time.Time) {
	n = max(1, n)
	p.mu.Lock()
	defer p.mu.Unlock()
	was := max(1, p.spenders)
	p.spenders = n
	if n == was {
		return
	}
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() {
			b.share.scale(float64(was) / float64(n))
			b.resize(now)
		}
	}
}

// refused takes a refusal at now of the call booked at mark, estimated
// at est and sent at sent, whose 429 reported r: if r shows less left
// than the call costs, and the call was booked knowing the budget and
// sent after the lane's share of it was last cut, the share is cut (see
// share). It reports whether r shows less left than the call costs (at
// least a token: the cost of a call sent before any budget was known is
// not estimated).
func (p *tokenPacer) refused(r TokenReport, est Cost, mark TokenMark, sent, now time.Time) (noRoom bool) {
	need := est.of(r.Kind)
	noRoom = r.Valid() && r.Remaining < max(1, need)
	if !r.Valid() || r.Remaining >= need {
		return noRoom
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := &p.buckets[r.Kind]
	if !b.known() || mark[r.Kind] <= b.blindTo || !b.share.cut(sent, now) {
		return noRoom
	}
	b.resize(now)
	return noRoom
}

// served takes, at now, an answer that reported no token budget to a call
// booked at mark: each budget it was booked on held room for it, which
// grows the share of that budget as a report of room does (see share).
func (p *tokenPacer) served(mark TokenMark, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() && mark[k] > b.blindTo {
			b.share.grow(now, true)
			b.resize(now)
		}
	}
}

// countedLocked returns the earliest instant to which a report of a call
// dispatched at dispatched and answered at answered can be dated without
// forgetting refill, and learns from its answer time. The provider counts
// a call when it arrives, before it answers: a call that travels no
// slower than the lane's fastest answer is counted no later than that
// fastest answer after its dispatch, however long it took to generate.
// (One that travels slower is counted later: observe bounds what its
// report credits.) It requires p.mu to be held.
func (p *tokenPacer) countedLocked(dispatched, answered time.Time) time.Time {
	took := answered.Sub(dispatched)
	if took < 0 || dispatched.IsZero() {
		return answered
	}
	if p.fastest == 0 || took <= p.fastest || answered.Sub(p.fastestAt) > fastestMemory {
		p.fastest, p.fastestAt = max(took, time.Nanosecond), answered
	}
	return dispatched.Add(min(took, p.fastest))
}

// giveBack returns to the known budgets, at now, the cost of a call the
// provider refused: it charged nothing for it (its 429 names what it used
// without it), and the call's retry books again. Reports of calls booked
// before it and answered after still count it among the bookings since
// theirs, which errs on the side of the budget.
func (p *tokenPacer) giveBack(cost Cost, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() {
			b.take(-cost.of(TokenKind(k)), now)
		}
	}
}

// tooLarge dates at now the size of each known budget that est surely
// exceeds (see TokensTooLarge).
func (p *tokenPacer) tooLarge(est Cost, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() && est.sure().of(TokenKind(k)) > b.limit {
			b.reported = now
		}
	}
}

// observeUsage corrects the estimates with the usage an answer reported:
// the call was estimated at est (for a body of bodyBytes) and used prompt
// and completion tokens.
func (p *tokenPacer) observeUsage(est Cost, bodyBytes int, prompt, completion int64, now time.Time) {
	if prompt <= 0 && completion <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Counts the budgets cannot hold are not counts of one call (a
	// provider or a gateway between that counts wrong): each is taken
	// as at most the largest known budget, so that no answer sets an
	// estimate that keeps the calls after it waiting.
	ceiling := 0.0
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() {
			ceiling = max(ceiling, b.limit)
		}
	}
	if ceiling == 0 {
		ceiling = maxAnswerTokens
	}
	usedPrompt, usedOutput := min(float64(prompt), ceiling), min(float64(completion), ceiling)
	if prompt > 0 && bodyBytes > 0 {
		// The ratio of the means, not the mean of the ratios: a budget
		// spends sums of tokens, and a body's JSON around its prompt
		// makes small bodies hold fewer tokens a byte than large ones,
		// so that the mean ratio underestimates the large calls. A
		// prompt counts at most a token a byte of its body, as text
		// does: an image or a file sent by reference is many tokens in
		// a few bytes and says nothing of the bytes a token of the
		// next call's text.
		byText := min(usedPrompt, float64(bodyBytes))
		if p.promptTokens == 0 {
			p.bodyBytes, p.promptTokens = float64(bodyBytes), byText
		} else {
			p.bodyBytes += usageWeight * (float64(bodyBytes) - p.bodyBytes)
			p.promptTokens += usageWeight * (byText - p.promptTokens)
		}
	}
	if p.output == 0 {
		p.output = usedOutput
	} else {
		p.output += usageWeight * (usedOutput - p.output)
	}
	// The budgets were booked with the estimate: give back or take what
	// the prompt really was. Output was booked at max_tokens, which is
	// what OpenAI counts; Anthropic gives unused output tokens back.
	dPrompt := usedPrompt - float64(est.Prompt)
	dOutput := usedOutput - float64(est.Output)
	for k := range p.buckets {
		b := &p.buckets[k]
		if !b.known() {
			continue
		}
		switch TokenKind(k) {
		case Tokens, InputTokens:
			b.take(dPrompt, now)
		case OutputTokens:
			b.take(dOutput, now)
		}
	}
}

// known reports whether any token budget is known.
func (p *tokenPacer) known() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.buckets {
		if p.buckets[k].known() {
			return true
		}
	}
	return false
}

// info returns the known budgets at now.
func (p *tokenPacer) info(now time.Time) []TokenBudgetInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []TokenBudgetInfo
	for k := range p.buckets {
		if b := &p.buckets[k]; b.known() {
			out = append(out, TokenBudgetInfo{Kind: TokenKind(k).String(), PerMinute: b.refill, Limit: b.limit, Share: b.share.of, Remaining: math.Floor(b.level(now))})
		}
	}
	return out
}

// EstimateCost returns what a call whose request body has bodyBytes bytes
// and whose max_tokens (or max_completion_tokens) is maxTokens (0: not
// set) is expected to cost: its prompt at the bytes per token the lane's
// answers have shown (4 until one reports usage), and its max_tokens, else
// the lane's mean output.
func (l *Lane) EstimateCost(bodyBytes, maxTokens int) Cost {
	return l.tokens.estimate(bodyBytes, maxTokens)
}

// ReserveTokens books cost on the lane's token budgets at now, holding the
// call's slot, and returns how long the call must wait before it is sent
// (at most MaxPause) and its mark for ObserveTokens; with no budget known
// the wait is 0. A call that costs more than a whole budget gets
// ErrCostExceedsBudget and must not be sent: no wait makes it fit. The
// caller waits between Hold and Unhold.
func (l *Lane) ReserveTokens(cost Cost, now time.Time) (time.Duration, TokenMark, error) {
	return l.tokens.reserve(cost, now, l.pace.maxGap)
}

// ObserveTokens takes a token budget that the answer to the call booked at
// mark and dispatched at dispatched reported, at answered, from its
// headers or from the numbers of a 429. The provider counted the call
// somewhere between its dispatch and its answer, and the budget it
// reports, less the calls booked after mark, lies between that report
// dated at the answer and dated at the dispatch plus the shortest answer
// time the lane has seen lately. The lane keeps its own estimate (its
// bookings and the refill) when it lies between the two, and moves it to
// the nearer one otherwise: a long answer's report does not forget the
// refill while it was generated, a call that reached the provider late
// (a new connection, a paused host) credits no refill twice, and a budget
// that others spend too, or a call that cost more than booked, brings the
// estimate down. The first report of a budget sets it.
func (l *Lane) ObserveTokens(r TokenReport, mark TokenMark, dispatched, answered time.Time) {
	l.tokens.observe(r, mark, dispatched, answered)
}

// TokensRefused takes the refusal (429) at now of the call booked at mark,
// estimated at est and sent at sent, with a token budget r that its
// answer reported (from its headers or its message):
// if r shows less left than the call costs, the budget held no room for
// it. A call booked knowing the budget (not the zero mark) was let out
// by the lane's count of it, which was wrong: others spend the same
// budget (replicas that share an API key), or it moved. The lane then
// takes a smaller share of the budget as its own (70% of what it took,
// once for the calls sent before), and grows it back by 2% of the
// budget a second while the budgets its answers report hold more than
// the slack it leaves (or, with no report, while its calls are served:
// see TokensServed). Call it after ObserveTokens with the same report.
// It reports whether r shows the budget without room for the call (or,
// for a call sent before the budget was known, empty): the refusal is
// then the budget's (RefusedTokenBudget).
func (l *Lane) TokensRefused(r TokenReport, est Cost, mark TokenMark, sent, now time.Time) bool {
	return l.tokens.refused(r, est, mark, sent, now)
}

// TokensServed takes an answer at now, to the call booked at mark, that
// reported no token budget (a budget known only from the numbers of 429s,
// as OpenAI states them with no headers): each budget the call was booked
// on held room for it, which grows the lane's share of that budget back
// as a report of room would (see TokensRefused).
func (l *Lane) TokensServed(mark TokenMark, now time.Time) {
	if mark != (TokenMark{}) {
		l.tokens.served(mark, now)
	}
}

// GiveBackTokens gives back to the lane's token budgets, at now, what the
// call booked at mark was to cost (its Cost, est) when the provider
// refused it (429, 529): a refused call costs no tokens, and a retry
// books its cost again. Call it before ObserveTokens with the refusal's
// own report, if any, which then bounds what is given back. A call
// booked nowhere (the zero mark) gives back nothing.
func (l *Lane) GiveBackTokens(est Cost, mark TokenMark, now time.Time) {
	if mark != (TokenMark{}) {
		l.tokens.giveBack(est, now)
	}
}

// TokensTooLarge takes the provider's refusal at now of a call estimated
// at est as larger than a whole token budget ("Request too large"): each
// known budget whose size the call surely exceeds stands as reported at
// now, so that it refuses such calls at once for another limitMemory,
// though the refusal reported no budget (a provider that states its
// budgets only in its 429 messages, or none in this one).
func (l *Lane) TokensTooLarge(est Cost, now time.Time) {
	l.tokens.tooLarge(est, now)
}

// ObserveUsage corrects the lane's estimates with the usage an answer
// reported at now: the call was estimated at est for a body of bodyBytes,
// and used prompt and completion tokens.
func (l *Lane) ObserveUsage(est Cost, bodyBytes int, prompt, completion int64, now time.Time) {
	l.tokens.observeUsage(est, bodyBytes, prompt, completion, now)
}

// HasTokenBudget reports whether the lane knows one of its provider's
// token budgets: until it does, calls need no cost estimate.
func (l *Lane) HasTokenBudget() bool { return l.tokens.known() }
