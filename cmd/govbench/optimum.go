package main

import (
	"math"
	"time"
)

// The optimum of a goodput scenario is the makespan of a governor that
// knows the provider's limit in advance and keeps it exactly full, with
// every call taking the median latency L. (mockllm's latency is lognormal
// around its median with sigma 0.2, so calls average exp(0.02) = 1.02 L:
// even a perfect governor scores about 0.98.)

// optimumCap is the optimum of n calls against a concurrency cap c:
// ⌈n/c⌉ rounds of L.
func optimumCap(n, c int, l time.Duration) time.Duration {
	return time.Duration((n+c-1)/c) * l
}

// optimumBucket is the optimum of n calls against a token bucket of rate
// r per second and burst b: the burst goes at once, the rest at the refill
// rate, and the last call takes L: (n−b)/r + L.
func optimumBucket(n, b int, r float64, l time.Duration) time.Duration {
	if n <= b {
		return l
	}
	return time.Duration(float64(n-b)/r*float64(time.Second)) + l
}

// capPhase is a concurrency cap in force from an offset of the run on.
type capPhase struct {
	at  time.Duration
	cap int
}

// optimumSchedule is the optimum of n calls against a cap that follows
// phases (ordered, the first at 0; the last lasts forever): the first
// instant t at which ∫₀ᵗ cap(s) ds / L reaches n calls. It counts fractions
// of a call, like a fluid; for one phase it equals n·L/c, within one L of
// optimumCap.
func optimumSchedule(n int, l time.Duration, phases []capPhase) time.Duration {
	need := float64(n) * l.Seconds() // in cap-seconds
	for i, p := range phases {
		end := math.Inf(1)
		if i+1 < len(phases) {
			end = phases[i+1].at.Seconds()
		}
		span := end - p.at.Seconds()
		if have := float64(p.cap) * span; p.cap > 0 && have >= need {
			return p.at + time.Duration(need/float64(p.cap)*float64(time.Second))
		} else if !math.IsInf(span, 1) {
			need -= have
		}
	}
	return time.Duration(math.MaxInt64) // the last phase has no capacity
}

// phaseUse is how much of a capacity phase the lane used: the mean of its
// calls in flight (sampled from GET /governor/lanes, at most the capacity)
// over the capacity. Calls admitted before a drop that are still running
// count only up to the new capacity.
type phaseUse struct {
	label string
	use   float64
}

// phaseUses measures each phase from its change to the next one (the last
// until end), inUse giving a sample's calls in flight. It shows which phase
// of a run loses the time.
func phaseUses(samples []laneSample, changes []capChange, end time.Duration, inUse func(laneSample) float64) []phaseUse {
	out := make([]phaseUse, len(changes))
	for i, ch := range changes {
		until := end
		if i+1 < len(changes) {
			until = changes[i+1].at
		}
		var sum float64
		var n int
		for _, s := range samples {
			if s.at >= ch.at && s.at < until {
				sum += min(max(inUse(s), 0), ch.capacity)
				n++
			}
		}
		if n > 0 && ch.capacity > 0 {
			out[i] = phaseUse{label: ch.label, use: sum / float64(n) / ch.capacity}
		} else {
			out[i] = phaseUse{label: ch.label}
		}
	}
	return out
}
