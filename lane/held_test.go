package lane

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// budgetRun is a lane driven, on explicit instants, by callers that always
// have a call waiting, against a provider whose request bucket binds long
// before its concurrency does: each call takes a slot, waits what the
// pacer says in it (Hold to Unhold), is counted by the provider as it is
// sent and answered latency later (a refusal at once), with the bucket's
// headers.
type budgetRun struct {
	t        *testing.T
	clock    *fakeClock
	set      *metrics.Set
	r        *Registry
	l        *Lane
	provider providerBucket
	latency  time.Duration
	events   *schedule[budgetEvent]
	stopAt   time.Time // no call takes a slot from then on
	// capacity, if not 0, is how many calls the provider serves at once:
	// it refuses a call sent while it serves that many, at once, with a
	// 429 that leaves its bucket alone. out is how many it serves now.
	capacity, out int

	// answered counts the calls answered before stopAt, and refused
	// the calls the provider refused.
	answered, refused int
	// atProvider sums, per answer, the calls in flight that were not
	// held; samples counts the answers summed.
	atProvider, samples int
	limits              []int // the highest limit after an answer, by second
	heldSeen            int   // the most calls held at once, as Info shows them
	// cuts are the decreases the capacity's refusals caused.
	cuts []capCut
}

// A capCut is a decrease on a refusal of the provider's capacity: the
// level the controller recorded for it (aimd.State.DecreaseLevel), and the
// lane's calls in flight and held at the refusal's answer.
type capCut struct {
	level          float64
	inFlight, held int
}

// A budgetEvent is a held call sent, or a call answered.
type budgetEvent struct {
	at      time.Time
	answer  bool
	held    bool
	seq     uint64
	granted time.Time
	sent    time.Time
	ok      bool
	capped  bool // refused by the provider's capacity
	report  Budget
}

func newBudgetRun(t *testing.T, preset aimd.Preset, provider providerBucket, latency time.Duration) *budgetRun {
	t.Helper()
	clock := &fakeClock{now: t0}
	set := metrics.NewSet()
	r, err := newRegistry(Config{AIMD: aimd.Config{Preset: preset, Max: 64, AdmissionWindow: -1}, Now: clock.Now, Metrics: set})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)
	provider.at = t0
	return &budgetRun{t: t, clock: clock, set: set, r: r, l: l, provider: provider, latency: latency,
		events: newSchedule(func(e budgetEvent) time.Time { return e.at })}
}

// fill lets out calls at now while the lane has slots for them.
func (b *budgetRun) fill(now time.Time) {
	for now.Before(b.stopAt) && b.l.q.TryAcquire(queue.Priority{}) {
		seq, wait := b.l.Reserve(b.t.Context(), now)
		if wait == 0 {
			b.send(budgetEvent{at: now, seq: seq, granted: now})
			continue
		}
		b.l.Hold(now)
		b.events.push(budgetEvent{at: now.Add(wait), held: true, seq: seq, granted: now})
	}
}

// capRefusal is how long a refusal of the provider's capacity takes.
const capRefusal = time.Millisecond

// send sends the call of e at e.at: the provider counts it now.
func (b *budgetRun) send(e budgetEvent) {
	if e.held {
		b.l.Unhold(e.at)
	}
	e.sent, e.answer = e.at, true
	e.capped = b.capacity > 0 && b.out >= b.capacity
	e.ok = !e.capped && b.provider.count(e.at)
	e.report = b.provider.report(e.at)
	switch {
	case e.ok:
		b.out++
		e.at = e.at.Add(b.latency)
	case e.capped:
		e.at = e.at.Add(capRefusal)
	}
	b.events.push(e)
}

// answer takes the answer e at e.at and gives its slot back.
func (b *budgetRun) answer(e budgetEvent) {
	l := b.l
	latency := e.at.Sub(e.sent)
	st := l.q.Stats()
	b.atProvider += st.InFlight - l.Held()
	b.samples++
	l.ObserveBudget(e.report, e.seq, e.sent, e.at)
	switch {
	case e.ok:
		b.out--
		if e.at.Before(b.stopAt) {
			b.answered++
		}
		l.Observe(Answered, latency, e.granted, e.at)
		l.Answered(e.at)
	case e.capped:
		b.refused++
		before := l.ctrl.State().Decreases
		l.Observe(RateLimited, latency, e.granted, e.at)
		if s := l.ctrl.State(); s.Decreases > before {
			b.cuts = append(b.cuts, capCut{level: s.DecreaseLevel, inFlight: st.InFlight, held: l.Held()})
		}
	default:
		b.refused++
		l.ObserveEmptyBudget(e.seq, latency, e.granted, e.at)
	}
	l.q.ReleaseTenant("")
	sec := int(e.at.Sub(t0) / time.Second)
	for len(b.limits) <= sec {
		b.limits = append(b.limits, 0)
	}
	b.limits[sec] = max(b.limits[sec], l.q.Stats().Limit)
}

// run lets calls out from t0 until d, and runs until every call is
// answered.
func (b *budgetRun) run(d time.Duration) {
	b.stopAt = t0.Add(d)
	b.fill(t0)
	for b.events.len() > 0 {
		e := b.events.pop()
		b.clock.Set(e.at)
		if e.answer {
			b.answer(e)
		} else {
			b.send(e)
		}
		if info := b.info(); info.Held > b.heldSeen {
			b.heldSeen = info.Held
		}
		b.fill(e.at)
	}
}

// info is the lane as GET /governor/lanes shows it now.
func (b *budgetRun) info() Info {
	return b.r.info(b.l, b.clock.Now(), b.l.q.Stats().InFlight)
}

// metrics is the lane's metrics as /metrics shows them.
func (b *budgetRun) metrics() string {
	var out bytes.Buffer
	b.set.WritePrometheus(&out)
	return out.String()
}

// A lane whose provider's request bucket binds (20 a second, answers in
// 500 ms: about 10 calls at the provider) holds the calls beyond it in
// their slots, waiting for the refill. Its limit is not what holds it
// back, and does not grow on the answers that come meanwhile: it stays
// near what the provider holds instead of climbing to Max, and the lane
// still spends the whole budget. /governor/lanes and governor_lane_held
// show the calls held, none once the holds end.
func TestLimitStaysNearWhatABindingBudgetLetsOut(t *testing.T) {
	const rate = 20.0
	latency := 500 * time.Millisecond
	b := newBudgetRun(t, aimd.Default, providerBucket{capacity: 20, rate: rate, level: 20}, latency)
	const secs = 60
	b.run(secs * time.Second)

	provider := float64(b.atProvider) / float64(b.samples)
	t.Logf("limit by second %v; at the provider %.1f on average; %d answered, %d refused; at most %d held",
		b.limits, provider, b.answered, b.refused, b.heldSeen)
	// The provider holds rate × latency calls, and the pacer lets out
	// paceMargin of the rate.
	assert.InDelta(t, rate*latency.Seconds(), provider, 1.5, "calls at the provider")
	assert.GreaterOrEqual(t, float64(b.answered), 0.95*rate*secs, "calls answered: the whole budget spent")
	assert.LessOrEqual(t, b.refused, b.answered/100, "calls the provider refused")
	last := slices.Max(b.limits[secs/2:])
	assert.LessOrEqual(t, last, 2*int(rate*latency.Seconds()),
		"the limit in the second half of the run: near the calls at the provider, not Max (64)")
	assert.Positive(t, b.heldSeen, "calls held, as /governor/lanes shows them")

	// Every call answered: no call is held, and the metric says so.
	assert.Zero(t, b.l.Held())
	assert.Zero(t, b.info().Held)
	assert.Contains(t, b.metrics(), fmt.Sprintf("governor_lane_held{lane=%q} 0", b.l.ID()))
}

// Hold counts a call from the wait's start to its end, whether the call
// is then sent or gives its slot up, in Info and in governor_lane_held.
func TestHeldCallsAreCountedUntilTheirWaitEnds(t *testing.T) {
	b := newBudgetRun(t, aimd.Default, providerBucket{}, time.Second)
	b.l.Hold(ms(0))
	b.l.Hold(ms(1))
	assert.Equal(t, 2, b.info().Held)
	assert.Contains(t, b.metrics(), fmt.Sprintf("governor_lane_held{lane=%q} 2", b.l.ID()))
	assert.True(t, b.l.held.since(ms(5)), "a call waits now")
	b.l.Unhold(ms(10))
	b.l.Unhold(ms(20))
	assert.Zero(t, b.info().Held)
	assert.Contains(t, b.metrics(), fmt.Sprintf("governor_lane_held{lane=%q} 0", b.l.ID()))
	assert.True(t, b.l.held.since(ms(20)), "a call out since 20 ms saw a wait end")
	assert.False(t, b.l.held.since(ms(21)), "none held since 21 ms")
}

// A provider that serves 11 calls at once behind a request bucket that
// lets out about 10 (20 a second, answers in 500 ms): the bucket binds,
// and the lane holds calls in their slots for it, but its bursts take the
// calls at the provider past 11 now and then, and the 11th is refused.
// The level a decrease records for that 429 is the calls the provider
// held, 12 with the one refused: the calls in flight less those held,
// never the held ones, which the provider never saw.
func TestRefusalUnderABindingBudgetRecordsTheLevelAtTheProvider(t *testing.T) {
	const capacity = 11
	b := newBudgetRun(t, aimd.Default, providerBucket{capacity: 20, rate: 20, level: 20}, 500*time.Millisecond)
	b.capacity = capacity
	b.run(60 * time.Second)
	t.Logf("limit by second %v; %d answered, %d refused; cuts %+v", b.limits, b.answered, b.refused, b.cuts)
	heldAtACut := false
	for _, c := range b.cuts {
		heldAtACut = heldAtACut || c.held > 0
		assert.Equal(t, float64(c.inFlight-c.held), c.level, "the level of %+v", c)
	}
	assert.True(t, heldAtACut, "a refusal with calls held")
}
