package aimd

import (
	"strconv"
	"time"
)

// Outcome classifies one answer (or non-answer) from the provider.
type Outcome uint8

const (
	// Success means the provider answered: a 2xx, or a final 4xx that
	// retrying cannot fix. Either way it had capacity for the call.
	Success Outcome = iota
	// RateLimited is a 429 or 529: the provider's congestion signal.
	RateLimited
	// Timeout means the attempt timed out; treated as a congestion signal.
	Timeout
	// Failure is a 5xx or a connection error. It is not a congestion
	// signal: it neither raises nor lowers the target.
	Failure
)

var outcomeNames = [...]string{"success", "rate_limited", "timeout", "failure"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// congestion reports whether o is a congestion signal.
func (o Outcome) congestion() bool { return o == RateLimited || o == Timeout }

// Sample is what the controller learns from one finished attempt.
type Sample struct {
	Outcome Outcome
	// Latency is the time from dispatch to answer: the call was
	// dispatched at now-Latency. For a Timeout it is the attempt timeout.
	Latency time.Duration
	// InFlight is the number of calls in flight in the lane when this
	// answer arrived, this one included. The Default preset grows the
	// target only while the limit is in use (InFlight >= Limit()).
	// Zero means the caller does not track it: the lane counts as in use.
	InFlight int
}

// Event is what a sample made the controller do, for the caller to log or
// count. Most samples cause None.
type Event uint8

const (
	// None: the limit did not change (the target may have moved within
	// the same integer limit).
	None Event = iota
	// Increased: the integer limit went up.
	Increased
	// Decreased: a multiplicative decrease was applied to the target
	// (the integer limit may be unchanged when it was already low).
	Decreased
	// Collapsed: the collapse rule fired and the target is now 1.
	Collapsed
	// Recovered: the controller left the collapsed state (see the preset
	// documentation for when).
	Recovered
	// Yielded: the Default preset gave back part of its share of a
	// provider for a round trip, so that competitors can grow (see the
	// package documentation).
	Yielded
)

var eventNames = [...]string{"none", "increased", "decreased", "collapsed", "recovered", "yielded"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "event(" + strconv.Itoa(int(e)) + ")"
}
