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

// Sample is what the controller learns from one finished attempt.
type Sample struct {
	Outcome Outcome
	// Latency is the time from dispatch to answer: the call was
	// dispatched at now-Latency. For a Timeout it is the attempt timeout.
	// (Package lane passes the provider's part of it: from the request's
	// hand-over to a connection, to the answer, or for a stream passed on
	// as it arrives, to its end, when its one sample comes.)
	Latency time.Duration
	// InFlight is the number of calls in flight in the lane when this
	// answer arrived, this one included: the slots in use. The Default
	// preset grows the target only while the limit is in use (InFlight
	// >= Limit()). Zero means the caller does not track it: the lane
	// counts as in use.
	InFlight int
	// Unsent is how many of InFlight the caller holds in their slots at
	// this answer before sending them (to meet a provider's request or
	// token budget): InFlight - Unsent are at the provider, this one
	// included. The Default preset reads those as the level at which the
	// provider refused a call: the level a 429 or a collapse records (the
	// ceiling found), and the calls a refusal in the start says the
	// provider holds. Where it reads the slots in use, it reads InFlight:
	// the in-use test above, and the calls a yield gives back a share of.
	// Zero when nothing is held.
	Unsent int
	// Dispatched is when the call was let out under the limit (its slot
	// granted), if the caller knows; zero means now-Latency. The Default
	// preset asks it which limit a call was sent under: an answer to a
	// call let out before the last decrease says nothing of the limit
	// after it. A call that waited for a slot goes on a little after it
	// was granted (its goroutine wakes, its request is built), long
	// enough for another call's 429 to cut the limit in between; from
	// now-Latency, its 429 would look like one sent under the cut limit.
	Dispatched time.Time
	// Held reports that, while this call was out, the caller held other
	// calls in their slots before sending them (to meet a provider's
	// request or token budget). The limit then does not say what the
	// provider holds, and is not what holds the lane back: the Default
	// preset does not grow the target on such an answer (RFC 7661's
	// "cwnd-limited"), nor read the silence of the calls out as
	// queueing at the provider (see overdue.go). Congestion signals,
	// yields and the slow-start threshold are as without it. Phoenix's
	// preset ignores it, and InFlight and Unsent.
	Held bool
}

// atProvider returns the calls at the provider when s arrived, s
// included: InFlight less Unsent, at least 1; 0 if the caller does not
// count its calls.
func (s Sample) atProvider() int {
	if s.InFlight <= 0 {
		return 0
	}
	return max(1, s.InFlight-s.Unsent)
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
