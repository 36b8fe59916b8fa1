package coord

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// flapInterval is the span over which the log says at most
// linesPerInterval changes of coordination's state: a loss and its
// restoration are logged at once; the changes that follow within the
// interval (a Redis that answers near the timeout goes and comes back many
// times a second) are counted, and once the interval has passed one line
// says the state then, with flaps=N, the changes not logged, and in, the
// time since the interval began. governor_redis_up and
// governor_redis_fallbacks_total count every change.
const flapInterval = 10 * time.Second

// linesPerInterval is how many changes the log says at once per interval.
const linesPerInterval = 2

// stateLog writes coordination's changes of state ("redis coordination
// lost", "redis coordination restored") in summary. Its only goroutine is
// a timer's, which close stops.
type stateLog struct {
	log      *slog.Logger
	instance string
	now      func() time.Time
	up       func() bool // the state now, for a summary line

	mu      sync.Mutex
	since   time.Time // when the interval began; zero: none yet
	lines   int       // changes logged in it
	flaps   int       // changes in it not logged
	lastErr error     // the failure behind the last loss, or the last logged by still
	stillAt time.Time // when still last logged
	timer   *time.Timer
	closed  bool
}

// changed logs, or counts, a change to up (err: why it was lost).
func (s *stateLog) changed(up bool, err error) {
	now := s.now()
	s.mu.Lock()
	if err != nil {
		s.lastErr = err
	}
	if s.since.IsZero() || now.Sub(s.since) >= flapInterval {
		line := s.lineLocked(up, now)
		s.mu.Unlock()
		line()
		return
	}
	if s.lines < linesPerInterval {
		s.lines++
		line := s.lineLocked(up, time.Time{})
		s.mu.Unlock()
		line()
		return
	}
	s.flaps++
	if s.timer == nil && !s.closed {
		s.timer = time.AfterFunc(s.since.Add(flapInterval).Sub(now), s.settle)
	}
	s.mu.Unlock()
}

// still logs a failure to rejoin whose cause differs from the last one
// logged (a Redis that was down and now refuses the credentials, say), at
// most once per flapInterval.
func (s *stateLog) still(err error) {
	s.mu.Lock()
	now := s.now()
	if s.closed || Classify(err) == Classify(s.lastErr) || !s.stillAt.IsZero() && now.Sub(s.stillAt) < flapInterval {
		s.mu.Unlock()
		return
	}
	s.lastErr, s.stillAt = err, now
	s.mu.Unlock()
	s.log.Warn("redis coordination still lost: governing locally", "instance", s.instance, "cause", Classify(err), "err", err)
}

// settle writes the state once the interval after the last line has
// passed, if changes were counted since.
func (s *stateLog) settle() {
	up, now := s.up(), s.now()
	s.mu.Lock()
	s.timer = nil
	if s.closed || s.flaps == 0 {
		s.mu.Unlock()
		return
	}
	line := s.lineLocked(up, now)
	s.mu.Unlock()
	line()
}

// lineLocked returns the line that says the state is up, to be written
// once s.mu is released; with now not zero, it starts a new interval then,
// and says the changes not logged in the one before. It requires s.mu to
// be held.
func (s *stateLog) lineLocked(up bool, now time.Time) func() {
	args := []any{"instance", s.instance}
	level, msg := slog.LevelInfo, "redis coordination restored"
	if !up {
		level, msg = slog.LevelWarn, "redis coordination lost: governing locally"
		args = append(args, "cause", Classify(s.lastErr), "err", s.lastErr)
	}
	if !now.IsZero() {
		if s.flaps > 0 {
			args = append(args, "flaps", s.flaps, "in", now.Sub(s.since).Round(time.Millisecond).String())
		}
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
		s.since, s.lines, s.flaps = now, 1, 0
	}
	return func() { s.log.Log(context.Background(), level, msg, args...) }
}

// close stops the timer of a pending summary; nothing is logged after it.
func (s *stateLog) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}
