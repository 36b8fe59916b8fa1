package lane

import (
	"fmt"
	"math"
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
						rate, _ := p.learned(now)
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
	r := runPacers([]*pacer{p}, provider, start, calls, start.Add(maxDelay), slots, travel, latency)
	return r.end, r.refused[0]
}

// pacersRun is what runPacers saw of each pacer's calls.
type pacersRun struct {
	end     time.Time // the last answer
	served  []int     // calls the provider took, by pacer
	refused []int     // calls it refused, by pacer
}

// runPacers runs pacers side by side on one provider bucket, as
// runPacer runs one: each has slots of its own and sends calls until it
// has sent calls or until stop, whichever is first.
func runPacers(pacers []*pacer, provider *providerBucket, start time.Time, calls int, stop time.Time, slots int, travel, latency time.Duration) pacersRun {
	type event struct {
		at      time.Time
		kind    int // reserve, count or answer
		pacer   int
		seq     uint64
		sent    time.Time
		report  Budget
		refused bool
	}
	const (
		reserve = iota
		send
		count
		answer
	)
	events := newSchedule(func(e event) time.Time { return e.at })
	push := events.push
	for range slots {
		for i := range pacers {
			push(event{at: start, kind: reserve, pacer: i})
		}
	}
	r := pacersRun{served: make([]int, len(pacers)), refused: make([]int, len(pacers))}
	started := make([]int, len(pacers))
	for events.len() > 0 {
		e := events.pop()
		p := pacers[e.pacer]
		switch e.kind {
		case reserve:
			if started[e.pacer] < calls && e.at.Before(stop) {
				started[e.pacer]++
				seq, wait := p.reserve(e.at)
				push(event{at: e.at.Add(wait), kind: send, pacer: e.pacer, seq: seq})
			}
		case send:
			// The call waited what the pacer said; it goes unless the
			// pacer now says its place in line is further back.
			if wait := p.behind(e.seq, e.at); wait > 0 {
				push(event{at: e.at.Add(wait), kind: send, pacer: e.pacer, seq: e.seq})
				continue
			}
			push(event{at: e.at.Add(travel), kind: count, pacer: e.pacer, seq: e.seq, sent: e.at})
		case count:
			answered, ok := e.sent.Add(latency), provider.count(e.at)
			switch {
			case !ok:
				r.refused[e.pacer]++
				answered = e.at
			case e.at.Before(stop):
				r.served[e.pacer]++
			}
			push(event{at: answered, kind: answer, pacer: e.pacer, seq: e.seq, sent: e.sent, report: provider.report(e.at), refused: !ok})
		case answer:
			p.observe(e.report, e.seq, e.sent, e.at)
			if e.refused {
				p.refused(e.seq, e.sent, e.at)
			}
			r.end = e.at
			push(event{at: e.at, kind: reserve, pacer: e.pacer})
		}
	}
	return r
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

// Replicas of a service that share one API key spend one request bucket,
// and every answer reports what all of them left in it. Each pacer learns
// the share of the bucket that is its own from the refusals of its calls:
// together they spend the bucket's rate, with a few calls refused while
// they learn it, and split it fairly. (A pacer that took the whole refill
// as its own has about half of its calls refused beside one other, and
// three in four beside three.) Every pacer here sends its 64/n calls at
// once from the start, which Governor's admission ramp never does: the
// first cuts, made while the others still spend at the whole share,
// split unevenly (Jain 0.89 to 1.00 over the first 20 s), and the growth
// that evens the shares out takes about a minute: over 90 s the split is
// fair (Jain 0.975 to 1.000) and under 4 calls in 100 are refused.
func TestPacersShareOneBucket(t *testing.T) {
	for _, tc := range []struct {
		pacers  int
		latency time.Duration
	}{{2, 100 * time.Millisecond}, {4, 100 * time.Millisecond}, {2, 480 * time.Millisecond}, {4, 480 * time.Millisecond}} {
		t.Run(fmt.Sprintf("%d pacers, %v", tc.pacers, tc.latency), func(t *testing.T) {
			// S2's bucket: 33 a second, as many at once.
			provider := providerBucket{capacity: 33, rate: 33, level: 33, at: t0}
			pacers := make([]*pacer, tc.pacers)
			for i := range pacers {
				// One call each learns the budget, as a lane's first
				// calls do.
				pacers[i] = &pacer{}
				seq, _ := pacers[i].reserve(t0)
				require.True(t, provider.count(t0))
				pacers[i].observe(provider.report(t0), seq, t0, t0.Add(tc.latency))
			}
			const run = 90 * time.Second
			start := t0.Add(tc.latency)
			r := runPacers(pacers, &provider, start, math.MaxInt, start.Add(run), 64/tc.pacers, time.Millisecond, tc.latency)
			served, refused := 0, 0
			shares := make([]float64, len(pacers))
			for i := range pacers {
				served += r.served[i]
				refused += r.refused[i]
				shares[i] = float64(r.served[i])
			}
			optimum := 33 + 33*run.Seconds()
			per100 := 100 * float64(refused) / float64(served+refused)
			fairness := jain(shares)
			t.Logf("served %d of %.0f (%.3f), %.2f refused per 100, Jain %.3f, %v", served, optimum, float64(served)/optimum, per100, fairness, r.served)
			assert.LessOrEqual(t, per100, 5.0, "calls refused per 100")
			assert.GreaterOrEqual(t, float64(served)/optimum, 0.95, "of the bucket's rate")
			assert.GreaterOrEqual(t, fairness, 0.95, "Jain's fairness index over the pacers' calls served")
		})
	}
}

// A refusal of a call the pacer let out knowing the budget cuts its share
// of the bucket, once for the calls booked before the cut; a refusal of a
// call let out blind cuts nothing. Reports of a bucket that holds more
// than the reported call grow the share back, by shareGrowth a second.
func TestPacerShare(t *testing.T) {
	// wait is the time to refill missing tokens at share of the rate, of
	// which the pacer spends paceMargin.
	wait := func(missing, rate float64) time.Duration {
		return time.Duration(missing / (rate * paceMargin) * float64(time.Second))
	}
	var p pacer
	assert.Nil(t, p.info(t0), "no budget reported: none shown")
	blind, _ := p.reserve(t0)
	// Capacity 10, none left, full in 900 ms: 10 a second.
	p.observe(Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond}, blind, t0, ms(50))
	assert.Equal(t, &RequestBudgetInfo{PerMinute: 600, Burst: 10, Share: 1, Remaining: 0}, p.info(ms(50)))
	p.refused(blind, t0, ms(50))
	_, d := p.reserve(ms(50))
	assert.Equal(t, wait(1, 10), d, "a blind call's refusal cuts nothing")

	seq, _ := p.reserve(ms(50))
	inFlight, _ := p.reserve(ms(50)) // sent before the cut
	p.refused(seq, ms(50), ms(60))
	p.refused(inFlight, ms(50), ms(60))
	assert.InDelta(t, shareCut, p.share.of, 1e-9, "one cut for the calls sent before it")
	assert.InDelta(t, shareCut, p.info(ms(60)).Share, 1e-9, "the lane shows the share it takes")
	// Four calls are booked ahead of the next one, and the count, at
	// share of the rate, refilled 10 ms since its first report.
	_, d = p.reserve(ms(60))
	assert.Equal(t, wait(4-0.1, 10*shareCut), d)

	// A report of the bucket holding more than the reported call, 5 s
	// on, grows the share back; one of an empty bucket does not.
	after, _ := p.reserve(ms(60))
	p.observe(Budget{Limit: 10, Remaining: 0, Reset: 900 * time.Millisecond}, after, ms(5060), ms(5060))
	assert.InDelta(t, shareCut, p.share.of, 1e-9, "the bucket held no call: the share stays")
	last, _ := p.reserve(ms(5060))
	p.observe(Budget{Limit: 10, Remaining: 3, Reset: 630 * time.Millisecond}, last, ms(10060), ms(10060))
	assert.InDelta(t, shareCut+5*shareGrowth, p.share.of, 1e-9, "the bucket held calls for 5 s")
	p.refused(last, ms(10060), ms(10070))
	assert.InDelta(t, (shareCut+5*shareGrowth)*shareCut, p.share.of, 1e-9, "a call sent after the cut")
	p.refused(after, ms(5060), ms(10080))
	assert.InDelta(t, (shareCut+5*shareGrowth)*shareCut, p.share.of, 1e-9, "a call sent before the second cut")
}

// A booking is a place in line, not an instant: a call that waited what
// the pacer said goes if the count refilled as expected; if the share was
// cut meanwhile, it waits until the count, at the new share, holds its
// token, and its refusal then cuts again (it was sent at the new share).
func TestPacerBookingIsAPlaceInLine(t *testing.T) {
	var p pacer
	blind, _ := p.reserve(t0)
	// Capacity 10, none left, full in a second: 9 to 10 a second.
	p.observe(Budget{Limit: 10, Remaining: 0, Reset: time.Second}, blind, t0, t0)
	rate, _ := p.learned(t0)
	require.Equal(t, 9.0, rate, "the lower bound")
	spaced := rate * paceMargin // the rate waits are spaced at
	a, wa := p.reserve(t0)
	b, wb := p.reserve(t0)
	c, wc := p.reserve(t0)
	for i, w := range []time.Duration{wa, wb, wc} {
		assert.InDelta(t, float64(i+1)/spaced, w.Seconds(), 1e-9, "booked %d ahead", i+1)
	}
	assert.Zero(t, p.behind(a, t0.Add(wa)), "the count refilled as expected: a goes")

	// a is refused, which cuts the share; b and c, booked at the whole
	// share, wait at the new one: b until the count holds its token.
	sentA := t0.Add(wa)
	p.refused(a, sentA, sentA)
	require.InDelta(t, shareCut, p.share.of, 1e-9)
	level := -3 + rate*wa.Seconds() + rate*shareCut*(wb-wa).Seconds() // at t0+wb, c's booking still in it
	d := p.behind(b, t0.Add(wb))
	assert.InDelta(t, -(level+1)/(spaced*shareCut), d.Seconds(), 1e-6, "b moved back")
	sentB := t0.Add(wb + d)
	assert.Zero(t, p.behind(b, sentB), "then b goes")
	assert.Positive(t, p.behind(c, t0.Add(wc)), "c moved back too")
	assert.Zero(t, p.behind(blind, t0), "a call let out blind was told nothing")

	p.refused(b, sentB, sentB.Add(time.Millisecond))
	assert.InDelta(t, shareCut*shareCut, p.share.of, 1e-9, "b, sent after the cut, cuts again")
}

// jain is Jain's fairness index of x: (Σx)² / (n·Σx²).
func jain(x []float64) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	return sum * sum / (float64(len(x)) * sq)
}
