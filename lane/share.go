package lane

import "time"

// share is the part of a provider's bucket that a lane takes as its own
// when others may draw on it too: the request pacer's bucket, and each
// token budget. The replicas of a service that share an API key spend one
// bucket, and each one's answers report what all of them left in it;
// nothing in a report says how much of the refill the others take. A
// lane that counted the whole refill as its own would let out, between
// two reports, what the others spend too: N replicas would send N times
// the refill and collect 429s for the rest. So the lane's count of the
// bucket refills at share of the rate and takes share of what each
// report says is left.
//
// A refusal for an empty bucket of a call booked knowing the budget says
// that share was too large (others spend the bucket, or its rate moved):
// the share is cut to shareCut of itself, once for the calls sent before
// the cut (they went out at the old share, and their refusals say nothing
// of the new one). A call booked before the cut but not yet sent goes out
// at the new share: a booking is a place in the line of the count, not
// an instant, and the caller asks again when its wait is over (see
// pacer.behind), so that the calls booked ahead at the old share do not
// spend what the new one no longer holds, and their refusals count.
// While the reports show the bucket holding room, the share grows back by
// shareGrowth of the bucket a second, up to all of it. Additive growth
// and multiplicative cuts bring replicas on one bucket to equal shares
// (Chiu and Jain, 1989); a lane alone, whose count is right, is not
// refused and keeps the whole bucket.
//
// The zero share takes none of the bucket; start gives it all of it.
// When the lane knows how many spend the bucket (Governors coordinated over
// a Coordinator, whose members are the Governors on the lane), it need
// not learn that from refusals: a budget it learns starts at an equal part
// of it, and a change in their number scales its share (see
// tokenPacer.setSpenders). Cuts and growth go on as above, for a bucket
// that others outside the coordination spend too and for demands that
// differ.
type share struct {
	of      float64   // of the bucket, 0 to 1
	grownAt time.Time // when it last grew (or was cut)
	cutAt   time.Time // when it was last cut
}

const (
	shareCut    = 0.7
	shareGrowth = 0.02 // of the bucket, a second
	shareFloor  = 1.0 / 64
)

// start gives the whole bucket at now.
func (s *share) start(now time.Time) { s.of, s.grownAt = 1, now }

// scale multiplies the share by f, keeping it within shareFloor and 1.
func (s *share) scale(f float64) { s.of = min(1, max(shareFloor, s.of*f)) }

// grow grows the share by shareGrowth a second since it last grew, up to
// 1, if room says the bucket held room; either way the time until now is
// spent.
func (s *share) grow(now time.Time, room bool) {
	if d := now.Sub(s.grownAt); d > 0 {
		if room {
			s.of = min(1, s.of+shareGrowth*d.Seconds())
		}
		s.grownAt = now
	}
}

// cut takes a refusal at now of a call sent at sent: unless the call was
// sent before the last cut, the share is cut to shareCut of itself (not
// below shareFloor). It reports whether it was.
func (s *share) cut(sent, now time.Time) bool {
	if !sent.After(s.cutAt) {
		return false
	}
	s.grow(now, false)
	s.of = max(shareFloor, s.of*shareCut)
	s.cutAt = now
	return true
}
