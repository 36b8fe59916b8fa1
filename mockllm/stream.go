package mockllm

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"
)

// waitResult is how a wait ended.
type waitResult int

const (
	waitElapsed waitResult = iota
	waitClientGone
	waitClosed
)

// waiter pauses a request, one timer reused across its pauses.
type waiter struct {
	s     *Server
	timer *time.Timer
}

func (wt *waiter) stop() {
	if wt.timer != nil {
		wt.timer.Stop()
	}
}

// pause waits for d, unless the client goes away or the server closes first.
func (wt *waiter) pause(ctx context.Context, d time.Duration) waitResult {
	if d <= 0 {
		select {
		case <-ctx.Done():
			return waitClientGone
		case <-wt.s.done:
			return waitClosed
		default:
			return waitElapsed
		}
	}
	if wt.timer == nil {
		wt.timer = time.NewTimer(d)
	} else {
		wt.timer.Reset(d)
	}
	select {
	case <-wt.timer.C:
		return waitElapsed
	case <-ctx.Done():
		return waitClientGone
	case <-wt.s.done:
		return waitClosed
	}
}

// hang waits until the client goes away or the server releases hung requests.
func (s *Server) hang(ctx context.Context) waitResult {
	s.stats.hangs.Add(1)
	select {
	case <-ctx.Done():
		return waitClientGone
	case <-s.release:
		return waitClosed
	}
}

// resetConn closes the connection under w with a TCP RST (SO_LINGER 0). It
// reports false when w cannot be hijacked (HTTP/2, a ResponseRecorder).
func resetConn(w http.ResponseWriter) bool {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close() // the point is to break the connection; nothing to report
	return true
}

// reset breaks the connection on purpose, having given the request's place
// back (release) so that /stats no longer counts it in flight when the
// client sees the reset. Where the connection cannot be
// hijacked it aborts the handler, which net/http turns into a broken
// connection or stream.
func (s *Server) reset(w http.ResponseWriter, release func()) {
	s.stats.resets.Add(1)
	release()
	if !resetConn(w) {
		panic(http.ErrAbortHandler)
	}
}

// midStreamFault strikes a started answer: a reset, or a hang until the
// client leaves or the server closes. It reports how a hang ended.
func (s *Server) midStreamFault(ctx context.Context, w http.ResponseWriter, f fault, release func()) waitResult {
	if f.kind == faultResetMidStream {
		s.reset(w, release)
		return waitElapsed
	}
	res := s.hang(ctx)
	if res == waitClosed {
		resetConn(w)
	}
	return res
}

// isMidStream reports whether f strikes after the answer has started.
func (f fault) isMidStream() bool {
	return f.kind == faultResetMidStream || f.kind == faultHangMidStream || f.kind == faultPingMidStream
}

// keepAliveSSE is the keep-alive event of a stream whose API has none of
// its own: an SSE comment line.
var keepAliveSSE = []byte(": keep-alive\n\n")

// pingForever sends ping, flushed, every ChunkDelay (100 ms when unset)
// until the client leaves or the server closes: a stream kept open that
// never ends. It reports how it ended.
func (s *Server) pingForever(ctx context.Context, w http.ResponseWriter, ping []byte) waitResult {
	s.stats.hangs.Add(1)
	if ping == nil {
		ping = keepAliveSSE
	}
	every := s.cfg.ChunkDelay
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	rc := http.NewResponseController(w)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return waitClientGone
		case <-s.release:
			resetConn(w)
			return waitClosed
		case <-tick.C:
		}
		if _, err := w.Write(ping); err != nil {
			return waitClientGone
		}
		if err := rc.Flush(); err != nil {
			return waitClientGone
		}
	}
}

// stream writes the events of ans as a server-sent event stream, flushing
// each one and pausing ChunkDelay between them, plus an equal share of gen,
// the time the answer takes to generate. A mid-stream fault strikes after
// half of the events: an overload ends the stream there with ans.overload.
// A stream that does not reach its last event counts as aborted.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, wt *waiter, ans answer, gen time.Duration, f fault, release func()) {
	events := ans.events
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.stats.answer(http.StatusOK)
	s.stats.streamsStarted.Add(1)
	rc := http.NewResponseController(w)

	// The i-th gap takes the generation from share i-1 to share i.
	gap := func(i int) time.Duration {
		n := time.Duration(len(events) - 1)
		return s.cfg.ChunkDelay + gen*time.Duration(i)/n - gen*time.Duration(i-1)/n
	}
	strike := -1
	if f.isMidStream() || f.kind == faultOverloadMidStream {
		strike = max(1, len(events)/2)
	}
	for i, ev := range events {
		if i == strike {
			s.stats.streamsAborted.Add(1)
			if f.kind == faultOverloadMidStream {
				s.stats.streamsOverloaded.Add(1)
				release()
				for _, ev := range ans.overload {
					_, _ = w.Write(ev) // the stream ends here either way
				}
				_ = rc.Flush()
				return
			}
			if f.kind == faultPingMidStream {
				s.pingForever(ctx, w, ans.ping)
				return
			}
			s.midStreamFault(ctx, w, f, release)
			return
		}
		if i > 0 {
			if res := wt.pause(ctx, gap(i)); res != waitElapsed {
				s.stats.streamsAborted.Add(1)
				if res == waitClosed {
					resetConn(w)
				}
				return
			}
		}
		if i == len(events)-1 {
			release()
		}
		if _, err := w.Write(ev); err != nil {
			s.stats.streamsAborted.Add(1)
			return
		}
		if err := rc.Flush(); err != nil {
			s.stats.streamsAborted.Add(1)
			return
		}
	}
	s.stats.streamsCompleted.Add(1)
}

// writeJSONAnswer writes a complete JSON answer; a mid-stream fault strikes
// after half of the body has been sent.
func (s *Server) writeJSONAnswer(ctx context.Context, w http.ResponseWriter, body []byte, f fault, release func()) {
	s.stats.answer(http.StatusOK)
	if !f.isMidStream() {
		release()
		writeBody(w, http.StatusOK, body)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body[:len(body)/2]) // the fault below breaks the answer anyway
	_ = http.NewResponseController(w).Flush()
	if s.midStreamFault(ctx, w, f, release) == waitClientGone {
		s.stats.clientGone.Add(1)
	}
}
