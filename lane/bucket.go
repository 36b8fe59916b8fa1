package lane

import "time"

// bucket is a lane's own count of a provider's bucket: tokens left at at,
// refilled at rate a second up to capacity, less what the lane books. The
// request pacer and each token budget keep one; the answers' reports
// bound it (see bound).
type bucket struct {
	capacity float64
	rate     float64 // a second
	tokens   float64 // at at; below 0 when calls are booked ahead of the refill
	at       time.Time
}

// level is the count at now.
func (b *bucket) level(now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		return min(b.capacity, b.tokens+b.rate*d.Seconds())
	}
	return b.tokens
}

// take books n at now (n below 0 gives back) and returns the level it
// found.
func (b *bucket) take(n float64, now time.Time) float64 {
	lvl := b.level(now)
	b.tokens = min(lvl-n, b.capacity)
	if now.After(b.at) {
		b.at = now
	}
	return lvl
}

// resize gives the count capacity and rate from now, the count so far
// refilled at the old ones.
func (b *bucket) resize(capacity, rate float64, now time.Time) {
	b.take(0, now)
	b.capacity, b.rate = capacity, rate
	b.tokens = min(b.tokens, capacity)
}

// bound takes a report of an answer at answered: left remained after the
// call the provider counted at some instant up to answered, less what the
// calls booked since are to cost. Dated at the answer, the report cannot
// credit a refill that did not happen; dated at counted, as early as the
// caller lets the count be (the dispatch, or for a token budget the
// dispatch plus the lane's fastest answer), it forgets no refill, but
// credits it twice when the call reached the provider later. The count
// stays where it is when it lies between the two readings, and moves to
// the nearer one otherwise. The bucket's capacity and rate become capacity
// and rate (the count so far refilled at the old ones).
func (b *bucket) bound(left float64, counted, answered time.Time, capacity, rate float64) {
	now := answered
	if b.at.After(now) {
		now = b.at // a call was booked after this answer came
	}
	own := b.level(now)
	late := bucket{capacity: capacity, rate: rate, tokens: left, at: answered}
	early := bucket{capacity: capacity, rate: rate, tokens: left, at: counted}
	*b = bucket{capacity: capacity, rate: rate, tokens: min(max(own, late.level(now)), early.level(now)), at: now}
}
