package lane

import (
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPacerSpacesDispatchesByTheReportedBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The pacer spends paceMargin of the rate it learns: waiting for the
	// missing share of a token takes missing / (rate · paceMargin).
	wait := func(missing, rate float64) time.Duration {
		return time.Duration(missing / (rate * paceMargin) * float64(time.Second))
	}
	var p pacer
	// No report yet: nothing is delayed.
	seq, d := p.reserve(t0)
	assert.Zero(t, d)
	// The answer to call 1 says: capacity 10, none left, full again in
	// 900ms. Remaining is rounded down, so the true count is in [0, 1) and
	// the rate in (9/0.9, 10/0.9]: the pacer takes the lower bound, 10/s.
	// The answer came 50 ms after the dispatch, the lane's fastest: the
	// provider may have counted the call as late as that, and the report
	// is taken as of then.
	now := t0.Add(50 * time.Millisecond)
	p.observe(Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond}, seq, t0, now)
	_, d = p.reserve(now) // none left: wait for one
	assert.Equal(t, wait(1, 10), d)
	_, d = p.reserve(now) // one more call booked ahead of it
	assert.Equal(t, wait(2, 10), d)
	// A stale report (an earlier call's) changes nothing.
	p.observe(Budget{Limit: 10, Remaining: 10}, 0, t0, now)
	_, d = p.reserve(now)
	assert.Equal(t, wait(3, 10), d)
	// A newer report with a higher lower bound raises the rate: 5 left,
	// full in 250ms: rate in (16, 20].
	p.observe(Budget{Limit: 10, Remaining: 5, Reset: 250 * time.Millisecond}, 4, now, now)
	_, d = p.reserve(now) // 5 tokens left after call 4: go
	assert.Zero(t, d)
	// Tokens never exceed the capacity however long the lane was idle.
	_, d = p.reserve(t0.Add(time.Hour))
	assert.Zero(t, d)
}

// pacerStep is, at an instant, either an answer reporting a budget or a
// dispatch reserved, and what the pacer makes of it.
type pacerStep struct {
	at int // milliseconds after t0
	// An answer to dispatch seq, dispatched at sent, reports budget; the
	// pacer then holds rate (when not 0).
	budget *Budget
	seq    uint64
	sent   int
	rate   float64
	// Otherwise a dispatch is reserved, and waits this long.
	wait time.Duration
}

// Every case runs on explicit instants: what the pacer waits for, step by
// step, from the budgets it is told.
func TestPacerTable(t *testing.T) {
	// wait is the time to refill missing tokens at the learned rate, of
	// which the pacer spends paceMargin.
	wait := func(missing, rate float64) time.Duration {
		return time.Duration(missing / (rate * paceMargin) * float64(time.Second))
	}
	empty := &Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond} // rate in (10, 11.1]: 10
	for _, tc := range []struct {
		name   string
		maxGap time.Duration
		steps  []pacerStep
	}{
		{"no report: no wait", 0, []pacerStep{{at: 0}, {at: 0}, {at: 0}}},
		{"an empty bucket waits for its refill", 0, []pacerStep{
			{at: 0},
			{at: 50, budget: empty, seq: 1, sent: 0, rate: 10},
			{at: 50, wait: wait(1, 10)},
			{at: 50, wait: wait(2, 10)}}},
		{"tokens left: no wait", 0, []pacerStep{
			{at: 0},
			{at: 10, budget: &Budget{Limit: 10, Remaining: 5, Reset: 250 * time.Millisecond}, seq: 1, rate: 16},
			{at: 10}, {at: 10}, {at: 10}}},
		{"an invalid budget is ignored", 0, []pacerStep{
			{at: 0},
			{at: 10, budget: &Budget{Limit: math.NaN(), Remaining: 0, Reset: time.Second}, seq: 1},
			{at: 10, budget: &Budget{Limit: 10, Remaining: -1, Reset: time.Second}, seq: 1},
			{at: 10, budget: &Budget{Limit: math.Inf(1), Remaining: 0, Reset: time.Second}, seq: 1},
			{at: 10}, {at: 10}}},
		{"a stale report changes nothing", 0, []pacerStep{
			{at: 0}, {at: 0},
			{at: 50, budget: empty, seq: 2, sent: 0, rate: 10},
			{at: 50, budget: &Budget{Limit: 10, Remaining: 10}, seq: 1, sent: 0, rate: 10},
			{at: 50, wait: wait(1, 10)}}},
		{"a burst after a long idle spends the capacity, then waits", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 2, Remaining: 0, Reset: time.Second}, seq: 1, rate: 1},
			{at: 3_600_000}, {at: 3_600_000},
			{at: 3_600_000, wait: wait(1, 1)},
			{at: 3_600_000, wait: wait(2, 1)}}},
		{"a wait for one token is bounded by the largest gap", time.Second, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 1, Remaining: 0, Reset: 24 * time.Hour}, seq: 1},
			{at: 0, wait: time.Second},
			{at: 0, wait: 2 * time.Second}}},
		{"no wait exceeds maxDelay", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 1, Remaining: 0, Reset: 24 * time.Hour}, seq: 1},
			{at: 0, wait: maxDelay}}},
		{"the rate's lower bound stands for rateMemory, then follows the provider", 0, []pacerStep{
			{at: 0},
			{at: 0, budget: &Budget{Limit: 10, Remaining: 0, Reset: 500 * time.Millisecond}, seq: 1, rate: 18},
			{at: 1000, budget: empty, seq: 1, rate: 10.0 / 0.9},
			{at: 1000 + int(rateMemory/time.Millisecond), budget: empty, seq: 1, rate: 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacer{maxGap: tc.maxGap}
			for i, st := range tc.steps {
				now := ms(st.at)
				if st.budget != nil {
					p.observe(*st.budget, st.seq, ms(st.sent), now)
					if st.rate != 0 {
						rate, _ := p.learned()
						assert.InDelta(t, st.rate, rate, 1e-9, "step %d: %+v", i, st)
					}
					continue
				}
				_, d := p.reserve(now)
				assert.Equal(t, st.wait, d, "step %d: %+v", i, st)
			}
		})
	}
}

// providerBucket is a provider's request bucket: capacity calls, refilled
// at rate a second, each call it counts takes one.
type providerBucket struct {
	capacity, rate, level float64
	at                    time.Time
}

func (b *providerBucket) refill(now time.Time) {
	b.level = min(b.capacity, b.level+b.rate*now.Sub(b.at).Seconds())
	b.at = now
}

// count takes a call arriving at now, or refuses it when the bucket is
// empty.
func (b *providerBucket) count(now time.Time) bool {
	b.refill(now)
	if b.level < 1 {
		return false
	}
	b.level--
	return true
}

// report is the budget the provider's answer at now reports: what is left,
// rounded down, and the time until the bucket is full.
func (b *providerBucket) report(now time.Time) Budget {
	b.refill(now)
	full := (b.capacity - b.level) / b.rate
	return Budget{Limit: b.capacity, Remaining: math.Floor(b.level), Reset: time.Duration(full * float64(time.Second))}
}

// burst reserves calls at now for as long as the pacer lets them out at
// once, each counted by the provider as it goes, and returns how many went
// and how many of them the provider refused.
func burst(p *pacer, provider *providerBucket, now time.Time) (letOut, refused int) {
	for {
		if _, wait := p.reserve(now); wait > 0 {
			return letOut, refused
		}
		letOut++
		if !provider.count(now) {
			refused++
		}
	}
}

// A report says what was left when the provider counted its call, some
// time between its dispatch and its answer.
func TestPacerReportOfACallCountedOrAnsweredLate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// From the dispatch to the provider's count, and from the count
		// to the answer.
		travel, generation time.Duration
		holds              int // what the bucket holds at the answer
	}{
		// Held 400 ms on its way (a new connection, a paused host), the
		// call finds the refill of that delay already in its report:
		// credited again from the dispatch, the pacer would let out
		// more calls than the bucket holds (7 of 4).
		{"held on its way", 400 * time.Millisecond, 5 * time.Millisecond, 4},
		// Counted at once and answered 2 s later: the refill while the
		// answer was generated is the lane's to spend. (Dated at the
		// answer, the report would let out none.)
		{"answered late", 5 * time.Millisecond, 2 * time.Second, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pacer
			provider := providerBucket{capacity: 10, rate: 10, level: 1, at: t0}
			// The first call is counted 5 ms after its dispatch and
			// answered 5 ms later, the fastest answer: it empties the
			// bucket.
			seq, _ := p.reserve(t0)
			require.True(t, provider.count(ms(5)))
			p.observe(provider.report(ms(5)), seq, t0, ms(10))

			// The next waits for a refill.
			seq, wait := p.reserve(ms(10))
			require.Positive(t, wait)
			sent := ms(10).Add(wait)
			counted := sent.Add(tc.travel)
			require.True(t, provider.count(counted))
			answered := counted.Add(tc.generation)
			p.observe(provider.report(counted), seq, sent, answered)

			// As its answer comes, the calls queued behind it go as the
			// pacer lets them.
			provider.refill(answered)
			require.Equal(t, tc.holds, int(provider.level))
			letOut, refused := burst(&p, &provider, answered)
			assert.Zero(t, refused, "calls the provider refused")
			assert.Equal(t, tc.holds, letOut, "the pacer lets out what the bucket holds")
		})
	}
}

// runPacer runs calls through p against provider from start, slots at a
// time: a slot reserves a dispatch, waits what the pacer says, sends the
// call, which the provider counts travel later and answers latency after
// its dispatch, reporting its budget as of the count; then the slot takes
// the next call. A call the provider refuses is answered at once. It
// returns when the last answer came and how many calls were refused.
func runPacer(p *pacer, provider *providerBucket, start time.Time, calls, slots int, travel, latency time.Duration) (end time.Time, refused int) {
	type event struct {
		at      time.Time
		kind    int // reserve, count or answer
		seq     uint64
		sent    time.Time
		report  Budget
		ordinal int // keeps the events of one instant in the order they were made
	}
	const (
		reserve = iota
		count
		answer
	)
	var events []event
	made := 0
	push := func(e event) {
		made++
		e.ordinal = made
		i := sort.Search(len(events), func(i int) bool {
			return events[i].at.After(e.at) || events[i].at.Equal(e.at) && events[i].ordinal > e.ordinal
		})
		events = slices.Insert(events, i, e)
	}
	for range slots {
		push(event{at: start, kind: reserve})
	}
	started := 0
	for len(events) > 0 {
		e := events[0]
		events = events[1:]
		switch e.kind {
		case reserve:
			if started < calls {
				started++
				seq, wait := p.reserve(e.at)
				sent := e.at.Add(wait)
				push(event{at: sent.Add(travel), kind: count, seq: seq, sent: sent})
			}
		case count:
			answered := e.sent.Add(latency)
			if !provider.count(e.at) {
				refused++
				answered = e.at
			}
			push(event{at: answered, kind: answer, seq: e.seq, sent: e.sent, report: provider.report(e.at)})
		case answer:
			p.observe(e.report, e.seq, e.sent, e.at)
			end = e.at
			push(event{at: e.at, kind: reserve})
		}
	}
	return end, refused
}

// A bucket can hold less than what it refills while one answer is
// generated (a second's refill, answers of two), so that a report dated at
// the answer says next to nothing, and reports from a bucket kept nearly
// full bound its rate poorly: a count refilled at a rate read low would
// fall ever further behind the bucket. The lane spends the provider's rate
// all the same, with no more 429s than one per 100 calls.
func TestPacerSpendsTheRateWhenAnswersOutlastTheBucket(t *testing.T) {
	var p pacer
	provider := providerBucket{capacity: 10, rate: 10, level: 10, at: t0}
	// One call learns the budget.
	seq, _ := p.reserve(t0)
	require.True(t, provider.count(ms(1)))
	p.observe(provider.report(ms(1)), seq, t0, ms(2000))

	const calls = 400
	end, refused := runPacer(&p, &provider, ms(2000), calls, 30, time.Millisecond, 2*time.Second)
	// At best the first 10 go at once, the rest at 10 a second, and the
	// last answer comes 2 s after its dispatch.
	optimum := time.Duration(calls-10)*100*time.Millisecond + 2*time.Second
	took := end.Sub(ms(2000))
	t.Logf("makespan %v, optimum %v: %.3f, %d refused", took, optimum, optimum.Seconds()/took.Seconds(), refused)
	assert.LessOrEqual(t, refused, calls/100, "calls the provider refused")
	assert.GreaterOrEqual(t, optimum.Seconds()/took.Seconds(), 0.97)
}
