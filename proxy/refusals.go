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
// want of room, with what an operator can do about each, in the settings'
// names n.
func refusalReasons(n Names) map[string]string {
	return map[string]string{
		CodeQueueFull:    "a lane's queue holds " + n.QueueCapacity + " calls",
		CodeQueueTimeout: "calls waited longer than " + n.QueueTimeout,
		CodeBuffersFull:  "request bodies held reached " + n.MaxBufferedBytes,
		CodeTooManyLanes: n.MaxLanes + " lanes are in use and none is idle",
	}
}

// refusalLog logs Governor's refusals in summary. It starts no goroutine.
type refusalLog struct {
	log     *slog.Logger
	now     func() time.Time
	reasons map[string]string // by code: see refusalReasons

	mu     sync.Mutex
	byCode map[string]*refusalState
}

type refusalState struct {
	lineAt time.Time // when the last line of the code was written
	more   int       // refusals since, not written
}

func newRefusalLog(log *slog.Logger, now func() time.Time, names Names) *refusalLog {
	reasons := refusalReasons(names)
	r := &refusalLog{log: log, now: now, reasons: reasons, byCode: make(map[string]*refusalState, len(reasons))}
	for code := range reasons {
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
	args := []any{"code", code, "why", r.reasons[code]}
	if laneID != "" {
		args = append(args, "lane", laneID)
	}
	if more > 0 {
		args = append(args, "more", more, "in", now.Sub(since).Round(time.Millisecond).String())
	}
	r.log.Warn("calls refused", args...)
}
