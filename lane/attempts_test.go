package lane

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newAttemptsLane(t *testing.T) *Lane {
	t.Helper()
	r := newTestRegistry(t, &fakeClock{now: t0}, 4)
	l, err := r.Get(key("sk-a", "m"))
	require.NoError(t, err)
	return l
}

// Contended tells a 429 that came while the lane's other calls were in
// flight, or answered since its dispatch, from one the provider gave to a
// lane that had nothing else in flight and answered nothing.
func TestContendedSeesOtherCallsAndSuccesses(t *testing.T) {
	l := newAttemptsLane(t)

	alone := l.Dispatch()
	assert.False(t, l.Contended(alone), "nothing else in flight, nothing answered")
	l.Done(alone)

	holder := l.Dispatch()
	loser := l.Dispatch()
	assert.True(t, l.Contended(loser), "an older call holds the slot")
	assert.True(t, l.Contended(holder), "a newer call in flight counts too: it may have reached the provider first")
	m := l.Mark()
	assert.True(t, l.InFlightUpTo(m))
	l.Done(loser)
	assert.False(t, l.ServedSince(Mark(loser)))

	late := l.Dispatch()
	l.Answered(t0)
	l.Done(holder)
	assert.True(t, l.ServedSince(Mark(loser)), "the holder was answered after the loser's dispatch")
	assert.True(t, l.Contended(late), "answered since its dispatch, even with nothing else in flight now")
	assert.False(t, l.InFlightUpTo(m), "every call in flight at m has ended")
	l.Done(late)
	l.Done(late) // a second Done is ignored

	after := l.Dispatch()
	assert.False(t, l.Contended(after), "answered before its dispatch only")
	l.Done(after)
	l.Done(Attempt{}) // no attempt
}

// The attempts kept stay within a small multiple of those in flight,
// however many end while an old one is still in flight.
func TestAttemptsKeptStayBounded(t *testing.T) {
	l := newAttemptsLane(t)
	old := l.Dispatch()
	for range 10_000 {
		l.Done(l.Dispatch())
	}
	assert.True(t, l.InFlightUpTo(Mark(old)), "the old attempt is still in flight")
	assert.LessOrEqual(t, len(l.att.seqs), 2*l.att.live+17)
	l.Done(old)
	assert.False(t, l.InFlightUpTo(l.Mark()))
	assert.Equal(t, 0, l.att.live)
}
