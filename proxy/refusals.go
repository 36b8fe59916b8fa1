package proxy

import (
	"log/slog"
	"sync"
	"time"
)

// refusalInterval is how often the log says, per code, that Governor
// turned calls away: the first refusal is logged at once, the ones that
// follow within the interval are counted, and the next line, at the first
// refusal after it, says how many with more=N over in. governor_errors_total
// counts every one.
const refusalInterval = 10 * time.Second

// refusalReasons are the errors by which Governor turns a call away for
// want of room, with what an operator can do about each.
var refusalReasons = map[string]string{
	CodeQueueFull:    "a lane's queue holds GOVERNOR_QUEUE_CAPACITY calls",
	CodeQueueTimeout: "calls waited longer than GOVERNOR_QUEUE_TIMEOUT",
	CodeBuffersFull:  "request bodies held reached GOVERNOR_MAX_BUFFERED_BYTES",
	CodeTooManyLanes: "GOVERNOR_MAX_LANES lanes are in use and none is idle",
}

// refusalLog logs Governor's refusals in summary. It starts no goroutine.
type refusalLog struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	byCode map[string]*refusalState
}

type refusalState struct {
	lineAt time.Time // when the last line of the code was written
	more   int       // refusals since, not written
}

func newRefusalLog(log *slog.Logger, now func() time.Time) *refusalLog {
	r := &refusalLog{log: log, now: now, byCode: make(map[string]*refusalState, len(refusalReasons))}
	for code := range refusalReasons {
		r.byCode[code] = &refusalState{}
	}
	return r
}

// refused logs, or counts, an error of Governor's own with code, answered
// to a call of the lane laneID (empty: before it had one); codes that do
// not turn a call away for want of room are ignored. A line names the lane
// of the refusal it is written for.
func (r *refusalLog) refused(code, laneID string) {
	s := r.byCode[code]
	if s == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	if !s.lineAt.IsZero() && now.Sub(s.lineAt) < refusalInterval {
		s.more++
		r.mu.Unlock()
		return
	}
	more, since := s.more, s.lineAt
	s.lineAt, s.more = now, 0
	r.mu.Unlock()
	args := []any{"code", code, "why", refusalReasons[code]}
	if laneID != "" {
		args = append(args, "lane", laneID)
	}
	if more > 0 {
		args = append(args, "more", more, "in", now.Sub(since).Round(time.Millisecond).String())
	}
	r.log.Warn("calls refused", args...)
}
