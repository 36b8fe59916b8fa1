package batch

import (
	"io"
	"net"
	"sync"
	"time"
)

// lineStream is the body of a progress answer: lines pushed by the batch
// as items finish, read by fasthttp as it writes the answer. Each Read
// returns what is pending, and fasthttp writes every Read as one flushed
// chunk, so a line reaches the client as soon as its item finishes.
//
// Closing it (fasthttp does, when the answer is written or the client is
// gone) calls stop: a client that leaves cancels the rest of the batch.
type lineStream struct {
	stop      func()
	conn      net.Conn      // the client's; its write deadline bounds a client that stops reading
	writeIdle time.Duration // how long a client may leave a chunk unread

	mu      sync.Mutex
	pending []byte
	ended   bool          // no more lines will come
	ready   chan struct{} // signalled (capacity 1) when pending grows or the stream ends
}

func newLineStream(conn net.Conn, writeIdle time.Duration, stop func()) *lineStream {
	return &lineStream{stop: stop, conn: conn, writeIdle: writeIdle, ready: make(chan struct{}, 1)}
}

// push queues one line (a newline is added).
func (ls *lineStream) push(line []byte) {
	ls.mu.Lock()
	ls.pending = append(append(ls.pending, line...), '\n')
	ls.mu.Unlock()
	ls.signal()
}

// end marks the last line pushed.
func (ls *lineStream) end() {
	ls.mu.Lock()
	ls.ended = true
	ls.mu.Unlock()
	ls.signal()
}

func (ls *lineStream) signal() {
	select {
	case ls.ready <- struct{}{}:
	default:
	}
}

// Read waits for pending lines and returns as many as fit in p.
func (ls *lineStream) Read(p []byte) (int, error) {
	for {
		ls.mu.Lock()
		if len(ls.pending) > 0 {
			n := copy(p, ls.pending)
			ls.pending = ls.pending[n:]
			if len(ls.pending) == 0 {
				ls.pending = nil // let the consumed buffer go
			}
			ls.mu.Unlock()
			// The chunk is written after Read returns: a client that
			// stops reading fails that write after writeIdle.
			_ = ls.conn.SetWriteDeadline(time.Now().Add(ls.writeIdle))
			return n, nil
		}
		ended := ls.ended
		ls.mu.Unlock()
		if ended {
			return 0, io.EOF
		}
		<-ls.ready
	}
}

// Close stops the batch if it still runs.
func (ls *lineStream) Close() error {
	ls.stop()
	return nil
}
