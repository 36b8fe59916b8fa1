package lane

import "github.com/llmgovernor/governor/aimd"

// A Refusal says what the provider's refusal of an attempt (a 429 or 529)
// was for, as far as its answer tells. The controller hears every refusal
// alike; the lane names it as the cause of the decrease it brings (see
// Cause), because each calls for a different remedy.
type Refusal uint8

const (
	// RefusedLimit is a 429 whose answer names no budget that ran out:
	// the account's concurrency or rate limit.
	RefusedLimit Refusal = iota
	// RefusedOverloaded is a 529, or a stream ended by overloaded_error:
	// the provider is short of capacity, whatever the account's limits.
	RefusedOverloaded
	// RefusedTokenBudget is a 429 whose report (headers, or the numbers
	// of its message) shows a token budget without room for the call.
	RefusedTokenBudget
)

// A Turnaway is why Governor turned a call of a lane away before it reached
// the provider, for want of room in the lane (see Lane.CountTurnedAway).
type Turnaway uint8

const (
	// TurnedAwayQueueFull: the lane's queue held Config.QueueCapacity calls.
	TurnedAwayQueueFull Turnaway = iota
	// TurnedAwayQueueTimeout: the call waited in the queue longer than it
	// may.
	TurnedAwayQueueTimeout
	numTurnaways
)

var turnawayNames = [numTurnaways]string{"queue_full", "queue_timeout"}

// String returns the name governor_lane_refused_total labels it with, the
// code of Governor's error.
func (t Turnaway) String() string { return turnawayNames[t] }

// A Cause is what lowered a lane's limit: the label of
// governor_lane_decreases_by_cause_total, and the cause a decrease's log
// line names.
type Cause uint8

const (
	// CauseRateLimited: a 429 that named no exhausted budget (RefusedLimit).
	CauseRateLimited Cause = iota
	// CauseOverloaded: a 529 or overloaded_error (RefusedOverloaded).
	CauseOverloaded
	// CauseRequestBudget: a 429 whose report said the request budget was
	// empty (see ObserveEmptyBudget).
	CauseRequestBudget
	// CauseTokenBudget: a 429 for a token budget (RefusedTokenBudget).
	CauseTokenBudget
	// CauseTimeout: an attempt timed out.
	CauseTimeout
	// CauseLatency: calls succeeded but slowed down as the limit rose (a
	// provider that queues calls past its knee).
	CauseLatency
	// CauseYield: the lane gave back part of its calls in flight so that
	// others on the same provider can grow (the Default preset's yield).
	CauseYield
	// CauseOtherGovernor: another Governor on a coordinated lane
	// decreased the shared limit, and this one took the cut.
	CauseOtherGovernor
	numCauses
)

var causeNames = [numCauses]string{"rate_limited", "overloaded", "request_budget", "token_budget", "timeout", "latency", "yield", "other_governor"}

// String returns the cause's name, as metrics label it and logs name it.
func (c Cause) String() string { return causeNames[c] }

// refusalCause is the cause of a decrease that a refusal brought.
func refusalCause(r Refusal) Cause {
	switch r {
	case RefusedOverloaded:
		return CauseOverloaded
	case RefusedTokenBudget:
		return CauseTokenBudget
	}
	return CauseRateLimited
}

// causeOf returns the cause of a decrease or collapse of the
// controller: the signal it names (aimd.State.DecreaseCause), made finer
// by what the attempt at hand was refused for (refusal), when it is the
// refusal that brought the decrease. A Phoenix controller decreases when a
// feedback window ends, often on a success: its cause is what the window
// held, which the attempt at hand does not tell.
func causeOf(signal aimd.Outcome, o Outcome, refusal Cause) Cause {
	switch signal {
	case aimd.RateLimited:
		if o == RateLimited {
			return refusal
		}
		return CauseRateLimited
	case aimd.Timeout:
		return CauseTimeout
	}
	return CauseLatency
}

// decreaseReason names the signal behind a controller's last decrease, as
// Info.LastDecreaseReason shows it: rate_limited, timeout, or latency
// (calls succeeded, but slowed down as the limit rose).
func decreaseReason(c aimd.Outcome) string {
	if c == aimd.Success {
		return "latency"
	}
	return c.String()
}
