package lane

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// SummaryInterval is how often a lane logs an event that repeats: the
// first "lane paused" (or "lane limit decreased", "lane collapsed", "lane
// paused by another governor", "upstream attempt failed" of an outcome)
// is logged at once; the ones that follow
// within the interval are counted, and the next line of the kind, written
// once the interval has passed (at the next such event, or the next
// attempt of the lane), shows the latest of them with more=N, the others
// since the previous line, and in, the time since it. Exact counts are in
// the lane's metrics.
const SummaryInterval = 10 * time.Second

// The events a lane logs in summary.
type eventKind int

const (
	evPaused eventKind = iota
	evPausedRemote
	evDecreased
	evCollapsed
	evStartEnded
	// Attempts that got no usable answer, one kind per outcome.
	evServerError
	evTimeout
	evConnError
	evQuota
	nEventKinds
)

var eventMessages = [nEventKinds]string{
	evPaused:       "lane paused",
	evPausedRemote: "lane paused by another governor",
	evDecreased:    "lane limit decreased",
	evCollapsed:    "lane collapsed",
	evStartEnded:   "lane start ended by a refusal",
	evServerError:  "upstream attempt failed",
	evTimeout:      "upstream attempt failed",
	evConnError:    "upstream attempt failed",
	evQuota:        "upstream attempt failed",
}

// failedEvent returns the event kind of an attempt that came to o, and
// whether o is a failure the lane logs: a server error, a timeout, no
// answer, or an exhausted quota (429s have pauses and decreases of their
// own).
func failedEvent(o Outcome) (eventKind, bool) {
	switch o {
	case ServerError:
		return evServerError, true
	case Timeout:
		return evTimeout, true
	case ConnError:
		return evConnError, true
	case Quota:
		return evQuota, true
	}
	return 0, false
}

// eventLog writes one lane's repeated events in summary. It starts no
// goroutine: a count is written by the next event or flush after its
// interval, with the time passed in.
type eventLog struct {
	log  *slog.Logger
	lane string

	mu    sync.Mutex
	kinds [nEventKinds]eventState
}

type eventState struct {
	lineAt time.Time   // when the last line of this kind was written
	more   int         // events since then, not written
	last   []slog.Attr // the attributes of the last of them
}

// event logs an event of kind k at now with attrs, or counts it when a
// line of its kind was written less than SummaryInterval ago. An event
// counted costs no allocation: attrs are copied into the kind's own slice
// (slog.Attr values hold strings and numbers without boxing them), which
// stays with the kind until a line hands it to write.
func (e *eventLog) event(k eventKind, now time.Time, attrs ...slog.Attr) {
	e.mu.Lock()
	s := &e.kinds[k]
	if !s.lineAt.IsZero() && now.Sub(s.lineAt) < SummaryInterval {
		s.more++
		s.last = append(s.last[:0], attrs...)
		e.mu.Unlock()
		return
	}
	more, since := s.more, s.lineAt
	s.lineAt, s.more = now, 0
	s.last = s.last[:0]
	e.mu.Unlock()
	e.write(k, attrs, more, since, now)
}

// flush writes the counts whose interval has passed at now.
func (e *eventLog) flush(now time.Time) {
	for k := range nEventKinds {
		e.mu.Lock()
		s := &e.kinds[k]
		if s.more == 0 || now.Sub(s.lineAt) < SummaryInterval {
			e.mu.Unlock()
			continue
		}
		// The line shows the last of them; more counts the others.
		more, since, attrs := s.more-1, s.lineAt, s.last
		s.lineAt, s.more, s.last = now, 0, nil
		e.mu.Unlock()
		e.write(k, attrs, more, since, now)
	}
}

// write logs one line of kind k: attrs, and when more events came since
// the last line than it said, how many and over how long.
func (e *eventLog) write(k eventKind, attrs []slog.Attr, more int, since, now time.Time) {
	args := make([]slog.Attr, 0, len(attrs)+3)
	args = append(args, slog.String("lane", e.lane))
	args = append(args, attrs...)
	if more > 0 {
		args = append(args, slog.Int("more", more), slog.String("in", now.Sub(since).Round(time.Millisecond).String()))
	}
	level := slog.LevelInfo
	if k >= evServerError {
		// The provider failing is what an operator looks for first.
		level = slog.LevelWarn
	}
	e.log.LogAttrs(context.Background(), level, eventMessages[k], args...)
}
