package lane

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
	"github.com/llmgovernor/governor/queue"
)

// connCall is a call of a connRun: waiting for a connection, or answered
// at at.
type connCall struct {
	at, granted, sent time.Time
	att               Attempt
	told              bool // its wait for a connection was told (WaitConn)
}

// connRun drives a lane, on explicit instants, with callers that always
// have a call waiting, against a provider that answers every call latency
// (a median; a fixed sequence of log-normal draws) after it reaches it
// and refuses none; the upstream has conns
// connections, and the calls the lane lets out beyond them wait for one in
// their slots, first come first served, as in fasthttp's HostClient. tell
// says whether the caller tells the lane of those waits (ConnsTaken,
// WaitConn, GotConn); either way, the latency it reports runs from the
// hand-over to a connection.
func connRun(t *testing.T, conns int, latency, d time.Duration, tell bool) Info {
	t.Helper()
	clock := &fakeClock{now: t0}
	r, err := newRegistry(Config{AIMD: aimd.Config{Max: 24, AdmissionWindow: -1}, MaxConnsPerUpstream: conns,
		Now: clock.Now, Metrics: metrics.NewSet()})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	l, err := r.Get(Key{Upstream: "default", Model: "m"})
	require.NoError(t, err)

	stop := t0.Add(d)
	answers := newSchedule(func(c connCall) time.Time { return c.at })
	var waiting []connCall
	free := conns
	rng := rand.New(rand.NewPCG(1, 2))
	send := func(c connCall, now time.Time) {
		c.sent, c.at = now, now.Add(time.Duration(float64(latency)*math.Exp(0.2*rng.NormFloat64())))
		answers.push(c)
	}
	fill := func(now time.Time) {
		for now.Before(stop) && l.q.TryAcquire(queue.Priority{}) {
			c := connCall{granted: now, att: l.Dispatch()}
			if tell && l.ConnsTaken() {
				l.WaitConn(now)
				c.told = true
			}
			if free > 0 {
				free--
				if c.told {
					l.GotConn(now)
				}
				send(c, now)
				continue
			}
			waiting = append(waiting, c)
		}
	}
	fill(t0)
	for answers.len() > 0 {
		c := answers.pop()
		clock.Set(c.at)
		// The connection goes to the next call waiting as the answer
		// is read.
		if len(waiting) > 0 {
			next := waiting[0]
			waiting = waiting[1:]
			if next.told {
				l.GotConn(c.at)
			}
			send(next, c.at)
		} else {
			free++
		}
		l.Observe(Answered, c.at.Sub(c.sent), c.granted, c.at)
		l.Answered(c.at)
		l.Done(c.att)
		l.q.ReleaseTenant("")
		fill(c.at)
	}
	return r.info(l, clock.Now(), l.q.Stats().InFlight)
}

// A lane whose calls wait for one of their upstream's two connections
// (the provider answers each in 200 ms, and refuses none) does not cut its
// limit: the calls waiting are held in their slots, not at the provider,
// and their silence is not the provider queueing them. Untold, the same
// waits read as queueing, and the lane's start is cut.
func TestCallsWaitingForAConnectionAreNotReadAsQueueing(t *testing.T) {
	told := connRun(t, 2, 200*time.Millisecond, 12*time.Second, true)
	assert.Zero(t, told.Decreases, "waits told: lane %+v", told)
	assert.Empty(t, told.LastDecreaseReason)

	untold := connRun(t, 2, 200*time.Millisecond, 12*time.Second, false)
	assert.Positive(t, untold.Decreases, "waits untold: lane %+v", untold)
	assert.Equal(t, "latency", untold.LastDecreaseReason)
}
