package coord

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Reserve books one dispatch on the lane's shared token bucket, which
// refills at rate per second and holds burst, and returns how long the call
// must wait before it is sent. It fails at once with ErrLocal in local
// mode.
//
// The bookings of one lane made while one of its round trips is under way
// are sent together in the next, one round trip per lane at a time: many
// calls dispatched at once (a pause that ends) would otherwise each wait
// for one of the client's connections, past the timeout, and switch the
// Governor to local mode. So a booking waits at most the round trip under
// way and its own, twice the timeout. A booking whose ctx ends returns at
// once, but for the one that sends the round trip, which returns when it
// is over (within those two timeouts); either way its slot may still be
// booked.
func (co *Coordinator) Reserve(ctx context.Context, lane string, rate, burst float64) (time.Duration, error) {
	if !co.up.Load() {
		return 0, ErrLocal
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return 0, nil
	}
	b, k, lead := co.book(lane, rate, burst)
	if lead {
		co.send(ctx, lane, b)
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.waits[k], nil
}

// booking is the bookings of one lane sent in one round trip.
type booking struct {
	n           int             // bookings; guarded by Coordinator.mu until sent
	sent        bool            // no more join; guarded by Coordinator.mu
	rate, burst float64         // the first booking's
	prev        <-chan struct{} // the lane's round trip before, if any
	done        chan struct{}   // closed when waits or err is set
	waits       []time.Duration
	err         error
}

// book adds a booking on lane to the booking not yet sent, or starts one
// (lead: the caller sends it). k is its place in the booking.
func (co *Coordinator) book(lane string, rate, burst float64) (b *booking, k int, lead bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	cur := co.bookings[lane]
	if cur != nil && !cur.sent {
		cur.n++
		return cur, cur.n - 1, false
	}
	b = &booking{n: 1, rate: rate, burst: burst, done: make(chan struct{})}
	if cur != nil {
		b.prev = cur.done
	}
	co.bookings[lane] = b
	return b, 0, true
}

// send waits for the lane's round trip under way, if any (it ends within
// the timeout), then books b's bookings in one. The round trip is the
// whole booking's: the leading caller's ctx ending does not cut it.
func (co *Coordinator) send(ctx context.Context, lane string, b *booking) {
	if b.prev != nil {
		<-b.prev
	}
	co.mu.Lock()
	b.sent = true
	n := b.n
	co.mu.Unlock()
	defer func() {
		co.mu.Lock()
		if co.bookings[lane] == b {
			delete(co.bookings, lane)
		}
		co.mu.Unlock()
		close(b.done)
	}()
	if !co.up.Load() {
		b.err = ErrLocal
		return
	}
	whole := context.WithoutCancel(ctx)
	tctx, cancel := context.WithTimeout(whole, co.cfg.Timeout)
	defer cancel()
	_, _, _, _, key := keys(lane)
	vals, err := gcraScript.Run(tctx, co.rdb, []string{key}, toRedis(co.cfg.Now(), co.offset.Load()), num(1000/b.rate), num(max(b.burst, 1)), n).StringSlice()
	if err == nil && len(vals) != n {
		err = fmt.Errorf("coord: booking script returned %d waits for %d bookings", len(vals), n)
	}
	if err != nil {
		b.err = co.failed(whole, err)
		return
	}
	b.waits = make([]time.Duration, n)
	for i, v := range vals {
		wait, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.err = co.failed(whole, err)
			return
		}
		b.waits[i] = time.Duration(wait * float64(time.Millisecond))
	}
}
