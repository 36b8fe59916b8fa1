package lane

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTokenPacerSpendsReportedBudget(t *testing.T) {
	var p tokenPacer
	cost := Cost{Prompt: 100, Output: 200} // 300 tokens
	w, mark, err := p.reserve(cost, t0, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, w, "no budget known: no wait")

	// The answer reports 6000 a minute (100 a second), 360 left after it:
	// 300 to spend and the slack of 1% (60) kept.
	slack := tokenSlack * 6000
	p.observe(TokenReport{Kind: Tokens, Limit: 6000, Remaining: 300 + slack}, mark, t0, t0)
	w, _, err = p.reserve(cost, t0, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, w, "300 to spend: the call fits")
	w, _, err = p.reserve(cost, t0, time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, 3, w.Seconds(), 0.001, "none left: wait for 300 tokens, at the refill rate")
	w, _, _ = p.reserve(cost, t0, time.Minute)
	assert.InDelta(t, 6, w.Seconds(), 0.001, "the next one queues behind it")

	// Refill: 10 s later, 1000 tokens have come back.
	info := p.info(t0.Add(10 * time.Second))
	require.Len(t, info, 1)
	assert.Equal(t, TokenBudgetInfo{Kind: "tokens", PerMinute: 6000, Limit: 6000, Share: 1, Remaining: 400 + slack}, info[0])
}

func TestTokenReportCountsCallsBookedSince(t *testing.T) {
	var p tokenPacer
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 60000}, TokenMark{}, t0, t0)
	cost := Cost{Prompt: 1000}
	_, first, _ := p.reserve(cost, t0, 0)
	for range 4 {
		p.reserve(cost, t0, 0)
	}
	// The first call's answer says 59000 are left: the four booked after
	// it are still to be charged.
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 59000}, first, t0, t0)
	assert.Equal(t, 55000.0, p.info(t0)[0].Remaining)
}

func TestCallLargerThanBudgetFailsAtOnce(t *testing.T) {
	var p tokenPacer
	p.observe(TokenReport{Kind: OutputTokens, Limit: 8000, Remaining: 8000}, TokenMark{}, t0, t0)
	_, _, err := p.reserve(Cost{Prompt: 100, Output: 10000}, t0, time.Minute)
	require.ErrorIs(t, err, ErrCostExceedsBudget)
	assert.Contains(t, err.Error(), "10000 output_tokens, the whole budget is 8000")
	_, _, err = p.reserve(Cost{Prompt: 100000, Output: 100}, t0, time.Minute)
	assert.NoError(t, err, "input tokens have no known budget")
}

// A budget's size refuses at once the calls that cost more than all of it
// only while it was reported lately: a budget grows (an account moving up
// a usage tier), and a lane whose calls are all larger than the size it
// last heard would otherwise refuse them for good, since refused calls
// report nothing. Past a minute such a call goes, after its wait, and its
// answer says the new size.
func TestBudgetThatGrewStopsRefusing(t *testing.T) {
	var p tokenPacer
	p.observe(TokenReport{Kind: Tokens, Limit: 30000, Remaining: 30000}, TokenMark{}, t0, t0)
	large := Cost{Prompt: 40000, Output: 1000}
	for _, at := range []time.Duration{0, 30 * time.Second, time.Minute - time.Millisecond} {
		_, _, err := p.reserve(large, t0.Add(at), time.Minute)
		require.ErrorIs(t, err, ErrCostExceedsBudget, "%v after the report", at)
	}
	later := t0.Add(time.Minute)
	wait, _, err := p.reserve(large, later, time.Minute)
	require.NoError(t, err, "a minute on, the call goes to learn the budget again")
	assert.Positive(t, wait, "after waiting for the budget")
	assert.LessOrEqual(t, wait, time.Minute, "no longer than it may")
	// Its answer reports the budget's new size: the next large calls go.
	p.observe(TokenReport{Kind: Tokens, Limit: 450000, Remaining: 449000}, TokenMark{}, later, later.Add(time.Second))
	wait, _, err = p.reserve(large, later.Add(2*time.Second), time.Minute)
	require.NoError(t, err)
	assert.Zero(t, wait)
	// A provider that refuses it again ("Request too large") reports the
	// same size, which refuses the next ones at once for another minute.
	p.observe(TokenReport{Kind: Tokens, Limit: 30000, Remaining: 30000}, TokenMark{}, later, later.Add(3*time.Second))
	_, _, err = p.reserve(large, later.Add(4*time.Second), time.Minute)
	assert.ErrorIs(t, err, ErrCostExceedsBudget)
}

func TestUsageCorrectsEstimates(t *testing.T) {
	var p tokenPacer
	assert.Equal(t, Cost{Prompt: 100, Output: 0}, guess(p.estimate(400, 0)), "4 bytes a token, no output known")
	p.observe(TokenReport{Kind: InputTokens, Limit: 6000, Remaining: 6000}, TokenMark{}, t0, t0)
	p.observe(TokenReport{Kind: OutputTokens, Limit: 6000, Remaining: 6000}, TokenMark{}, t0, t0)
	est := p.estimate(400, 500)
	_, _, err := p.reserve(est, t0, 0)
	require.NoError(t, err)
	// The prompt was 200 tokens (2 bytes a token), the answer 50 of 500.
	p.observeUsage(est, 400, 200, 50, t0)
	info := p.info(t0)
	assert.Equal(t, []TokenBudgetInfo{{"input_tokens", 6000, 6000, 1, 5800}, {"output_tokens", 6000, 6000, 1, 5950}}, info)
	assert.Equal(t, Cost{Prompt: 200, Output: 50}, guess(p.estimate(400, 0)), "learned: 2 bytes a token, 50 output tokens")
	assert.Equal(t, Cost{Prompt: 200, Output: 64}, guess(p.estimate(400, 64)))
}

// guess returns the estimate of c alone.
func guess(c Cost) Cost { return Cost{Prompt: c.Prompt, Output: c.Output} }

// A call is refused as larger than a whole budget only for what it surely
// costs: an answer whose usage counts far more prompt tokens than its
// body's text (an image sent by its URL: 1,500 tokens in 130 bytes), or a
// count no call can reach, never makes the next large prompt look as if it
// could not run, nor keeps the calls after it waiting.
func TestAbsurdUsageDoesNotRefuseTheNextCalls(t *testing.T) {
	for _, tc := range []struct {
		name               string
		prompt, completion int64
	}{
		{"an image by reference", 1500, 5},
		{"a prompt of 2^53 tokens", 1 << 53, 5},
		{"an answer of 2^53 tokens", 15, 1 << 53},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p tokenPacer
			p.observe(TokenReport{Kind: Tokens, Limit: 200000, Remaining: 200000}, TokenMark{}, t0, t0)
			// A first call of 61 bytes whose prompt was 15 tokens, then
			// the one with the absurd usage.
			est := p.estimate(61, 0)
			_, _, err := p.reserve(est, t0, time.Minute)
			require.NoError(t, err)
			p.observeUsage(est, 61, 15, 5, t0)
			est = p.estimate(130, 0)
			_, _, err = p.reserve(est, t0, time.Minute)
			require.NoError(t, err)
			p.observeUsage(est, 130, tc.prompt, tc.completion, t0)

			// 200 KB of English text, about 40,000 tokens, asking for
			// at most 1,000 out, a minute later (the budget full again).
			later := t0.Add(time.Minute)
			big := p.estimate(200_000, 1000)
			wait, _, err := p.reserve(big, later, time.Minute)
			require.NoError(t, err, "a call that fits the budget is not refused")
			assert.Zero(t, wait, "the budget is full: nothing to wait for")
			// A short call without max_tokens goes at once too.
			wait, _, err = p.reserve(p.estimate(61, 0), later, time.Minute)
			require.NoError(t, err)
			assert.Zero(t, wait)
		})
	}
	// A call whose prompt at the rule of thumb, four bytes a token, and
	// max_tokens exceed the whole budget is still refused.
	var p tokenPacer
	p.observe(TokenReport{Kind: Tokens, Limit: 200000, Remaining: 200000}, TokenMark{}, t0, t0)
	_, _, err := p.reserve(p.estimate(1_000_000, 0), t0, time.Minute)
	assert.ErrorIs(t, err, ErrCostExceedsBudget, "1 MB of prompt: 250,000 tokens at the least")
	_, _, err = p.reserve(p.estimate(400, 250000), t0, time.Minute)
	assert.ErrorIs(t, err, ErrCostExceedsBudget, "max_tokens beyond the budget")
}

func TestTokenReportValidity(t *testing.T) {
	for _, r := range []TokenReport{{Limit: 0}, {Limit: -1}, {Limit: 10, Remaining: -1}, {Kind: numTokenKinds, Limit: 10}} {
		assert.False(t, r.Valid(), "%+v", r)
	}
	assert.True(t, TokenReport{Kind: OutputTokens, Limit: 10}.Valid())
}

func TestPromptEstimateHoldsForMixedSizes(t *testing.T) {
	// Bodies of three sizes whose JSON adds 78 bytes around prompts of
	// 200, 2,000 and 8,000 bytes (52, 502 and 2,002 tokens): what a lane
	// books for the three together must be what they use together.
	bodies, prompts := []int{278, 2078, 8078}, []int64{52, 502, 2002}
	var p tokenPacer
	for i := range 300 {
		k := i % 3
		p.observeUsage(p.estimate(bodies[k], 10), bodies[k], prompts[k], 10, t0)
	}
	for phase := range 3 {
		var booked, used float64
		for j := range 3 {
			k := (phase + j) % 3
			booked += float64(p.estimate(bodies[k], 10).Prompt)
			used += float64(prompts[k])
			p.observeUsage(p.estimate(bodies[k], 10), bodies[k], prompts[k], 10, t0)
		}
		assert.InDelta(t, 1, booked/used, 0.02, "booked %.0f prompt tokens for %.0f used, phase %d", booked, used, phase)
	}
}

func TestTokenReportIsAsOfTheProviderCount(t *testing.T) {
	var p tokenPacer
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	report := func(remaining float64, dispatched, answered time.Duration) float64 {
		p.observe(TokenReport{Kind: OutputTokens, Limit: 60000, Remaining: remaining}, TokenMark{}, at(dispatched), at(answered))
		return p.info(at(answered))[0].Remaining
	}
	assert.Equal(t, 30000.0, report(30000, 0, 500*time.Millisecond), "the first answer: as of its arrival")
	assert.Equal(t, 30000.0, report(30000, time.Second, 1100*time.Millisecond), "a faster one: as of its arrival")
	// Dispatched at 2 s, answered at 4 s: the provider counted it by
	// 2.1 s, and 1.9 s of refill (1,000 a second) came since.
	assert.Equal(t, 21900.0, report(20000, 2*time.Second, 4*time.Second), "a long answer: as of its dispatch plus the fastest answer")
	// The fastest answer is forgotten after a while: a provider that
	// slows down is followed.
	assert.Equal(t, 20000.0, report(20000, 20*time.Second, 22*time.Second), "no fast answer lately: as of its arrival")
}

// A call that reaches the provider late (held 400 ms between its dispatch
// and the provider's count, by a paused host or a slow connection) finds
// 400 ms more refill than the lane's fastest answer implies: its report,
// dated as early as the provider can have counted it, would credit that
// refill a second time. The lane's own bookings cap it.
func TestTokenReportOfALateCountCreditsNoRefillTwice(t *testing.T) {
	var p tokenPacer
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// 60,000 a minute, 1,000 a second; 1,000 left at t0, reported by an
	// answer that took 1 ms, the fastest.
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 1000}, TokenMark{}, at(-time.Millisecond), t0)
	cost := Cost{Prompt: 100}
	_, mark, err := p.reserve(cost, t0, 0)
	require.NoError(t, err)
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 900}, mark, t0, at(time.Millisecond))
	assert.Equal(t, 900.0, p.info(at(time.Millisecond))[0].Remaining)

	// The next, dispatched at 1 ms, is counted at 401 ms: 800 left after
	// it plus 400 of refill. It is answered at 402 ms, when 1,201 are
	// left, as the lane's bookings say; dated at 2 ms the report would
	// say 1,600.
	_, mark, err = p.reserve(cost, at(time.Millisecond), 0)
	require.NoError(t, err)
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 1200}, mark, at(time.Millisecond), at(402*time.Millisecond))
	assert.InDelta(t, 1201, p.info(at(402 * time.Millisecond))[0].Remaining, 1, "the refill is counted once")
	// A call of 1,000 tokens waits for the 399 that the 1% kept unspent
	// (600) leaves it short of; credited 1,600 it would go at once.
	w, _, err := p.reserve(Cost{Prompt: 1000}, at(402*time.Millisecond), 0)
	require.NoError(t, err)
	assert.InDelta(t, 0.399, w.Seconds(), 0.001)
}

// A report moves the lane's estimate only as far as the time of the
// provider's count leaves it unsure: a long answer's report keeps the
// refill while it was generated, a budget others spend too is followed
// down, and what the lane booked too much comes back, as of the answer
// at the latest.
func TestTokenReportBoundsTheLanesOwnEstimate(t *testing.T) {
	var p tokenPacer
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	report := func(remaining float64, mark TokenMark, dispatched, answered time.Duration) float64 {
		p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: remaining}, mark, at(dispatched), at(answered))
		return p.info(at(answered))[0].Remaining
	}
	// 1,000 a second; the fastest answer takes 10 ms.
	report(10000, TokenMark{}, -10*time.Millisecond, 0)
	_, mark, _ := p.reserve(Cost{Prompt: 1000}, t0, 0)
	assert.InDelta(t, 9000, report(9000, mark, 0, 10*time.Millisecond), 1, "counted by 10 ms")

	// Dispatched at 1 s and counted at once, 8,990 left; answered 2 s
	// later. Dated at the answer the report would say 8,990: the lane's
	// bookings keep the refill since the count, less the 10 ms it may
	// have taken.
	_, mark, _ = p.reserve(Cost{Prompt: 1000}, at(time.Second), 0)
	assert.InDelta(t, 10980, report(8990, mark, time.Second, 3*time.Second), 1, "a long answer keeps its refill")

	// Others spent 5,000 of the budget since.
	_, mark, _ = p.reserve(Cost{Prompt: 1000}, at(4*time.Second), 0)
	assert.InDelta(t, 5970, report(4980, mark, 4*time.Second, 5*time.Second), 1, "others' spending is followed down")

	// The lane booked 3,000 for a call the provider charged 1,000.
	_, mark, _ = p.reserve(Cost{Prompt: 3000}, at(5*time.Second), 0)
	assert.InDelta(t, 4970, report(4970, mark, 5*time.Second, 6*time.Second), 1, "what the lane booked too much comes back")
}

// A call the provider refused cost it nothing: its booking comes back, so
// that its retry is booked once, not twice; a report that says the
// provider charged it after all bounds what comes back.
func TestTokenBookingOfARefusedCallComesBack(t *testing.T) {
	var p tokenPacer
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	remaining := func(d time.Duration) float64 { return p.info(at(d))[0].Remaining }
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 10000}, TokenMark{}, at(-time.Millisecond), t0)
	cost := Cost{Prompt: 3000}
	_, _, err := p.reserve(cost, t0, 0)
	require.NoError(t, err)
	require.Equal(t, 7000.0, remaining(0))

	// Refused with nothing said of the budget, then retried.
	p.giveBack(cost, t0)
	assert.Equal(t, 10000.0, remaining(0), "given back")
	_, mark, err := p.reserve(cost, t0, 0)
	require.NoError(t, err)
	assert.Equal(t, 7000.0, remaining(0), "the retry is booked once")

	// Refused by a provider that charged it all the same, and says so.
	p.giveBack(cost, t0)
	p.observe(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 7000}, mark, t0, at(time.Millisecond))
	assert.InDelta(t, 7001, remaining(time.Millisecond), 1, "the report bounds what came back")
}

// A refusal that reports less of a budget left than the call costs, of a
// call booked knowing the budget, cuts the lane's share of it, once for
// the calls booked before the cut; the count then refills at that share
// of the rate. Reports of a budget holding more than the slack grow the
// share back, by shareGrowth a second.
func TestTokenBudgetShare(t *testing.T) {
	var p tokenPacer
	cost := Cost{Prompt: 100, Output: 200} // 300 tokens
	empty := TokenReport{Kind: Tokens, Limit: 6000, Remaining: 0}
	_, blind, _ := p.reserve(cost, t0, time.Minute)
	// 6000 a minute (100 a second), none left.
	p.observe(empty, blind, t0, t0)
	p.refused(empty, cost, blind, t0, t0)
	assert.Equal(t, 1.0, p.buckets[Tokens].share.of, "a call booked blind cuts nothing")

	_, a, _ := p.reserve(cost, t0, time.Minute)
	_, booked, _ := p.reserve(cost, t0, time.Minute) // before the cut
	p.refused(empty, cost, a, t0, ms(10))
	p.refused(empty, cost, booked, t0, ms(10))
	assert.InDelta(t, shareCut, p.buckets[Tokens].share.of, 1e-9, "one cut for the calls booked before it")
	_, c, _ := p.reserve(cost, ms(10), time.Minute)
	p.refused(TokenReport{Kind: Tokens, Limit: 6000, Remaining: 300}, cost, c, ms(10), ms(10))
	assert.InDelta(t, shareCut, p.buckets[Tokens].share.of, 1e-9, "the budget had room for the call: its refusal was not this budget's")

	// Booked: 600 at t0 (the count -600), 10 ms of refill at the full
	// rate (1), then 300 more: the count is -899 at ms(10), and refills
	// at shareCut of 100 a second, keeping the slack of its share.
	w, _, err := p.reserve(cost, ms(10), time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, (300+899+tokenSlack*6000*shareCut)/(100*shareCut), w.Seconds(), 1e-6)
	info := p.info(ms(10))[0]
	assert.Equal(t, 6000.0, info.PerMinute, "the budget, not the share")
	assert.InDelta(t, shareCut, info.Share, 1e-9)

	// A report of a budget holding more than the slack, 5 s on, grows the
	// share back; one holding less does not.
	_, d, _ := p.reserve(cost, ms(5010), time.Minute)
	p.observe(TokenReport{Kind: Tokens, Limit: 6000, Remaining: 3000}, d, ms(5010), ms(5010))
	assert.InDelta(t, shareCut+5*shareGrowth, p.buckets[Tokens].share.of, 1e-9, "the budget held room for 5 s")
	p.observe(TokenReport{Kind: Tokens, Limit: 6000, Remaining: 50}, d, ms(10010), ms(10010))
	assert.InDelta(t, shareCut+5*shareGrowth, p.buckets[Tokens].share.of, 1e-9, "the budget held no more than the slack")
	_, e, _ := p.reserve(cost, ms(10010), time.Minute)
	p.refused(empty, cost, e, ms(10010), ms(10010))
	assert.InDelta(t, (shareCut+5*shareGrowth)*shareCut, p.buckets[Tokens].share.of, 1e-9, "a call booked after the cut")
}

// Governors coordinated over Redis know how many of them spend a lane's
// budgets: a budget learned among n starts at an equal part of it rather
// than the whole, and a change in their number scales each share (a
// Governor that joins takes its part from each, one that leaves gives its
// part back). Alone, nothing changes.
func TestTokenBudgetSharedAmongCoordinatedGovernors(t *testing.T) {
	cost := Cost{Prompt: 100, Output: 200} // 300 tokens
	budget := TokenReport{Kind: Tokens, Limit: 6000, Remaining: 6000}

	var alone tokenPacer
	alone.setSpenders(1, t0)
	alone.observe(budget, TokenMark{}, t0, t0)
	assert.Equal(t, TokenBudgetInfo{Kind: "tokens", PerMinute: 6000, Limit: 6000, Share: 1, Remaining: 6000}, alone.info(t0)[0])

	var p tokenPacer
	p.setSpenders(4, t0)
	p.observe(budget, TokenMark{}, t0, t0)
	assert.Equal(t, TokenBudgetInfo{Kind: "tokens", PerMinute: 6000, Limit: 6000, Share: 0.25, Remaining: 1500}, p.info(t0)[0],
		"a quarter of what is left")
	// Its quarter spent, a call waits for a quarter of the refill (25
	// tokens a second), keeping the slack of its share.
	for range 5 {
		_, _, err := p.reserve(cost, t0, time.Minute)
		require.NoError(t, err)
	}
	w, _, err := p.reserve(cost, t0, time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, (300+tokenSlack*1500)/25, w.Seconds(), 1e-6)

	p.setSpenders(2, t0)
	assert.InDelta(t, 0.5, p.buckets[Tokens].share.of, 1e-9, "two of the four left")
	p.setSpenders(3, t0)
	assert.InDelta(t, 1.0/3, p.buckets[Tokens].share.of, 1e-9, "one joined")
	p.setSpenders(0, t0)
	assert.InDelta(t, 1, p.buckets[Tokens].share.of, 1e-9, "alone again: the whole budget")
	p.setSpenders(64*64, t0)
	assert.Equal(t, shareFloor, p.buckets[Tokens].share.of, "never below the floor")
}

// A coordinated lane takes the number of Governors from each sync.
func TestCoordinatedLaneSharesTokenBudgetsByMembers(t *testing.T) {
	c := newCoordLane(t)
	c.sync(Shared{Target: 16, Members: 4, Share: 4, Fair: 4, OthersSynced: c.clock.Now()})
	c.l.ObserveTokens(TokenReport{Kind: Tokens, Limit: 60000, Remaining: 60000}, TokenMark{}, t0, t0)
	require.Len(t, c.info().TokenBudgets, 1)
	assert.Equal(t, 0.25, c.info().TokenBudgets[0].Share)
	c.sync(Shared{Target: 16, Members: 2, Share: 8, Fair: 8, OthersSynced: c.clock.Now()})
	assert.Equal(t, 0.5, c.info().TokenBudgets[0].Share, "two left")
	c.l.fallback()
	assert.Equal(t, 0.5, c.info().TokenBudgets[0].Share, "Redis lost: the lane keeps its share")
}

// A token booking is a place in line, as a request booking is: a call
// that waited what the lane said goes if the count refilled as expected,
// and waits longer if the lane's share was cut meanwhile (never longer
// than maxWait since it was booked). An answer that reports no budget to
// a call booked on it grows the share back, as a report of room does: a
// budget known only from 429 messages shares as one known from headers.
func TestTokenBookingIsAPlaceInLine(t *testing.T) {
	var p tokenPacer
	cost := Cost{Prompt: 100, Output: 200} // 300 tokens
	empty := TokenReport{Kind: Tokens, Limit: 6000, Remaining: 0}
	p.observe(empty, TokenMark{}, t0, t0) // 100 a second, none left
	wa, a, _ := p.reserve(cost, t0, time.Minute)
	wb, b, _ := p.reserve(cost, t0, time.Minute)
	slack := tokenSlack * 6000
	assert.InDelta(t, (300+slack)/100, wa.Seconds(), 1e-9)
	assert.InDelta(t, (600+slack)/100, wb.Seconds(), 1e-9)
	sentA := t0.Add(wa)
	assert.Zero(t, p.behind(a, t0, sentA, time.Minute), "the count refilled as expected: a goes")

	p.refused(empty, cost, a, sentA, sentA)
	require.InDelta(t, shareCut, p.buckets[Tokens].share.of, 1e-9)
	level := -600 + 100*wa.Seconds() + 100*shareCut*(wb-wa).Seconds()
	missing := shareCut*slack - level
	assert.InDelta(t, missing/(100*shareCut), p.behind(b, t0, t0.Add(wb), time.Minute).Seconds(), 1e-6, "b moved back")
	assert.Equal(t, 400*time.Millisecond, p.behind(b, t0, t0.Add(wb), wb+400*time.Millisecond), "no more than maxWait since booked")

	p.served(b, t0.Add(wb+5*time.Second))
	assert.InDelta(t, shareCut+(wb-wa+5*time.Second).Seconds()*shareGrowth, p.buckets[Tokens].share.of, 1e-9, "b was served: the budget held room")
	p.served(TokenMark{}, t0.Add(wb+10*time.Second))
	assert.InDelta(t, shareCut+(wb-wa+5*time.Second).Seconds()*shareGrowth, p.buckets[Tokens].share.of, 1e-9, "a call booked on no budget says nothing of it")
}

// providerTokens is a provider's token budget: limit a minute, refilled
// continuously; a call is counted whole when it arrives.
type providerTokens struct {
	limit, level float64
	at           time.Time
}

// count takes a call of cost arriving at now, or refuses it when the
// budget holds less.
func (b *providerTokens) count(cost float64, now time.Time) bool {
	b.level = min(b.limit, b.level+b.limit/60*now.Sub(b.at).Seconds())
	b.at = now
	if b.level < cost {
		return false
	}
	b.level -= cost
	return true
}

// Replicas of a service that share one API key spend its token budget
// together, and every answer reports what all of them left in it. Each
// lane learns its share of the budget from the refusals of its calls:
// together they spend the budget's rate, with a few calls refused while
// they learn it, and split it evenly. (Lanes that each took the whole
// refill as their own had 30 of every 100 calls refused beside one
// other, 52 beside three.)
func TestTokenPacersShareOneBudget(t *testing.T) {
	costs := []Cost{{Prompt: 60, Output: 64}, {Prompt: 500, Output: 256}, {Prompt: 2000, Output: 512}}
	mean := (124.0 + 756 + 2512) / 3
	const latency, travel, run = 750 * time.Millisecond, time.Millisecond, 60 * time.Second
	for _, lanes := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d lanes", lanes), func(t *testing.T) {
			// 4 calls a second, the budget empty at the start (each lane
			// learned it from one call).
			provider := providerTokens{limit: 4 * mean * 60, at: t0}
			pacers := make([]tokenPacer, lanes)
			for i := range pacers {
				pacers[i].observe(TokenReport{Kind: Tokens, Limit: provider.limit, Remaining: 0}, TokenMark{}, t0, t0)
			}
			const (
				reserve = iota
				send
				count
				answer
			)
			type event struct {
				at      time.Time
				kind    int
				lane, n int
				sent    time.Time
				mark    TokenMark
				booked  time.Time
				refused bool
				report  TokenReport
			}
			events := newSchedule(func(e event) time.Time { return e.at })
			push := events.push
			for i := range lanes {
				for range 64 / lanes {
					push(event{at: t0, kind: reserve, lane: i})
				}
			}
			served, refused, answered := make([]float64, lanes), 0, 0 // tokens, calls, calls
			calls := make([]int, lanes)
			stop := t0.Add(run)
			for events.len() > 0 {
				e := events.pop()
				p := &pacers[e.lane]
				cost := costs[e.n%len(costs)]
				switch e.kind {
				case reserve:
					if e.at.After(stop) {
						continue
					}
					wait, mark, err := p.reserve(cost, e.at, time.Minute)
					require.NoError(t, err)
					push(event{at: e.at.Add(wait), kind: send, lane: e.lane, n: e.n, mark: mark, booked: e.at})
				case send:
					// The call waited what the lane said; it goes unless
					// the lane now says its place in line is further back.
					if wait := p.behind(e.mark, e.booked, e.at, time.Minute); wait > 0 {
						e.at = e.at.Add(wait)
						push(e)
						continue
					}
					push(event{at: e.at.Add(travel), kind: count, lane: e.lane, n: e.n, sent: e.at, mark: e.mark})
				case count:
					ok := provider.count(cost.of(Tokens), e.at)
					answered := e.sent.Add(latency)
					if !ok {
						answered = e.at.Add(travel)
					}
					r := TokenReport{Kind: Tokens, Limit: provider.limit, Remaining: math.Floor(provider.level)}
					push(event{at: answered, kind: answer, lane: e.lane, n: e.n, sent: e.sent, mark: e.mark, refused: !ok, report: r})
				case answer:
					next := event{at: e.at, kind: reserve, lane: e.lane}
					if e.refused {
						// The call is retried after the provider's
						// Retry-After of a second.
						refused++
						p.giveBack(cost, e.at)
						next.at, next.n = e.at.Add(time.Second), e.n
					} else {
						if e.at.Before(stop) {
							served[e.lane] += cost.of(Tokens)
							answered++
						}
						calls[e.lane]++
						next.n = calls[e.lane]*lanes + e.lane
					}
					p.observe(e.report, e.mark, e.sent, e.at)
					if e.refused {
						p.refused(e.report, cost, e.mark, e.sent, e.at)
					}
					push(next)
				}
			}
			total := 0.0
			for _, s := range served {
				total += s
			}
			optimum := provider.limit / 60 * (run - latency).Seconds() // tokens
			per100 := 100 * float64(refused) / float64(answered+refused)
			t.Logf("served %.0f of %.0f (%.3f), %.2f refused per 100, Jain %.3f, %v", total, optimum, total/optimum, per100, jain(served), served)
			assert.LessOrEqual(t, per100, 10*float64(lanes), "calls refused per 100")
			assert.GreaterOrEqual(t, total/optimum, 0.95, "of the budget's rate")
			assert.GreaterOrEqual(t, jain(served), 0.95, "Jain's fairness index over the lanes' tokens served")
		})
	}
}

// A token budget refills at the rate its reports' resets say: a budget
// that is full again in a day is not paced as one per minute, nor one
// full again in a second. Without a reset, or with one too coarse to tell
// (Anthropic's, to the second), a budget is taken as one per minute.
func TestTokenBudgetRefillFollowsItsReset(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		r         TokenReport
		perMinute float64 // the refill a minute learned
	}{
		{"per minute, no reset", TokenReport{Limit: 60000, Remaining: 59000}, 60000},
		{"per minute, its reset", TokenReport{Limit: 60000, Remaining: 59000, Reset: time.Second, ResetError: ms}, 60000},
		{"per minute, reset to the second", TokenReport{Limit: 40000, Remaining: 38500, RemainingError: 1000, Reset: 3 * time.Second, ResetError: 2 * time.Second}, 40000},
		{"per minute, nothing used", TokenReport{Limit: 60000, Remaining: 60000}, 60000},
		// 8,640,000 a day is 100 a second: 1,000 used refill in 10 s.
		{"per day", TokenReport{Limit: 8_640_000, Remaining: 8_639_000, Reset: 10 * time.Second, ResetError: 10 * ms}, 6000},
		{"per day, empty", TokenReport{Limit: 8_640_000, Remaining: 0, Reset: 24 * time.Hour, ResetError: time.Second}, 6000},
		// 1,000 a second: 500 used refill in half a second.
		{"per second", TokenReport{Limit: 1000, Remaining: 500, Reset: 500 * ms, ResetError: ms}, 60000},
	} {
		var p tokenPacer
		p.observe(tc.r, TokenMark{}, t0, t0)
		info := p.info(t0)
		require.Len(t, info, 1, tc.name)
		assert.InEpsilon(t, tc.perMinute, info[0].PerMinute, 0.01, "%s: %+v", tc.name, info[0])
		assert.Equal(t, tc.r.Limit, info[0].Limit, tc.name)
	}
}

// A call that finds a daily budget empty waits for the day's refill rate
// (100 tokens a second here: 10.6 s for 1,000 tokens and the slack, a
// hundredth of a minute's refill), not for a sixtieth of the budget a
// second (0.6 s); one that finds a per-second budget empty waits half a
// second for 500 tokens, not half a minute.
func TestEmptyTokenBudgetWaitsForItsOwnRefill(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		r    TokenReport
		cost Cost
		wait time.Duration
	}{
		{"per day", TokenReport{Limit: 8_640_000, Remaining: 0, Reset: 24 * time.Hour, ResetError: time.Second}, Cost{Prompt: 1000}, 10600 * time.Millisecond},
		{"per second", TokenReport{Limit: 1000, Remaining: 0, Reset: time.Second, ResetError: time.Millisecond}, Cost{Prompt: 500}, 510 * time.Millisecond},
	} {
		var p tokenPacer
		p.observe(tc.r, TokenMark{}, t0, t0)
		wait, _, err := p.reserve(tc.cost, t0, time.Hour)
		require.NoError(t, err, tc.name)
		assert.InEpsilon(t, tc.wait.Seconds(), wait.Seconds(), 0.01, "%s: waited %s", tc.name, wait)
	}
}
