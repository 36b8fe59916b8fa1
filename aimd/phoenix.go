package aimd

import "time"

// This file reproduces Arize Phoenix's ConcurrencyController, class
// ConcurrencyController in packages/phoenix-evals/src/phoenix/evals/executors.py
// (the same class is in packages/phoenix-client/src/phoenix/client/utils/executors.py,
// e.g. at commit 00f739031ea7b8267ee45dcccca4eed35889a545). Comments quote
// the Python it mirrors. Where Phoenix has an oddity (the internal target is
// not clamped; the error deque is never cleared) it is reproduced on purpose:
// the Default preset is where those are fixed.
//
// How Phoenix's AsyncExecutor feeds it, which decides our mapping of outcomes:
//   - a completed task:         record_success(latency)   -> Success
//   - a task timeout:           record_timeout()          -> Timeout
//   - a RateLimitError:         record_error()            -> RateLimited
//   - any other exception:      nothing is recorded       -> Failure
//
// so a Failure neither counts in a window nor closes one.

// phoenixState is the part of Controller used by the Phoenix preset.
type phoenixState struct {
	windowStart time.Time // _window_started_at
	issues      int       // _timeout_count + _error_count
	timeouts    int       // _timeout_count, for State.DecreaseCause only
	// errTimes is _error_timestamps = deque(maxlen=collapse_error_threshold):
	// the last CollapseThreshold 429 instants, oldest at errTimes[errHead].
	// Phoenix never prunes or clears it (not even after a collapse).
	errTimes []time.Time
	errHead  int
	errLen   int
}

func (p *phoenixState) init(cfg Config, now time.Time) {
	// self._window_started_at = time.time()
	p.windowStart = now
	// deque(maxlen=self._collapse_error_threshold), threshold = max(1, int(...))
	p.errTimes = make([]time.Time, cfg.CollapseThreshold)
}

// pushError appends t, dropping the oldest when full (deque.append with
// maxlen), and returns the oldest kept instant (deque[0]).
func (p *phoenixState) pushError(t time.Time) time.Time {
	n := len(p.errTimes)
	if p.errLen < n {
		p.errTimes[(p.errHead+p.errLen)%n] = t
		p.errLen++
	} else {
		p.errTimes[p.errHead] = t
		p.errHead = (p.errHead + 1) % n
	}
	return p.errTimes[p.errHead]
}

// observePhoenixLocked requires c.mu to be held.
func (c *Controller) observePhoenixLocked(s Sample, now time.Time) Event {
	p := &c.phoenix
	ev := None
	switch s.Outcome {
	case Success:
		// record_success: _success_count += 1 and the latency EWMA
		// ("if None: = latency else (1-a)*smoothed + a*latency").
		c.observeLatencyLocked(s.Latency)
	case Timeout:
		// record_timeout: _timeout_count += 1. Not added to the collapse
		// deque: only record_error can collapse.
		p.issues++
		p.timeouts++
	case RateLimited:
		// record_error: _error_count += 1; _error_timestamps.append(now);
		// if len(ts) >= threshold and now - ts[0] <= collapse_window:
		//     _target_concurrency = 1.0
		p.issues++
		oldest := p.pushError(now)
		if p.errLen >= c.cfg.CollapseThreshold && now.Sub(oldest) <= c.cfg.CollapseWindow {
			c.decrLevel = c.target
			c.target = 1
			c.collapsed = true
			c.collapses++
			c.lastDecr = now
			c.decrCause = RateLimited
			ev = Collapsed
		}
	default:
		// Failure: Phoenix's executor requeues other exceptions without
		// calling the controller at all.
		return None
	}
	// Every record_* ends with:
	//   if self._feedback_window_finished(): self._update_concurrency_target()
	// with _feedback_window_finished = (now - _window_started_at) >= window.
	// The sample that closes a window is counted in it, and the next window
	// starts at this sample's instant (not at the old start + window).
	if now.Sub(p.windowStart) >= c.cfg.Window {
		// _update_concurrency_target: had_issue = timeout + error counts > 0;
		// target *= decrease_ratio if had_issue else target += increase_step.
		// No clamping here: Phoenix clamps only when reading
		// target_concurrency, so the raw target can wind up above max
		// (and sink below 1).
		if p.issues > 0 {
			c.decrLevel = c.target
			c.target *= c.cfg.DecreaseRatio
			c.decreases++
			c.lastDecr = now
			// What the window held (not the sample that closed it, which
			// is often a success): timeouts only, or some 429s.
			c.decrCause = RateLimited
			if p.timeouts == p.issues {
				c.decrCause = Timeout
			}
			if ev == None {
				ev = Decreased
			}
		} else {
			c.target += c.cfg.IncreaseStep
			if c.collapsed {
				// Phoenix has no recovery rule of its own: we call the
				// first clean window after a collapse its recovery.
				c.collapsed = false
				ev = Recovered
			}
		}
		p.windowStart = now
		p.issues, p.timeouts = 0, 0
	}
	return ev
}
