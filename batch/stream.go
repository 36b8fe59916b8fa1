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
//
// A client that reads slower than items finish holds back the batch
// instead of its lines piling up in memory: once maxPending bytes wait,
// push waits for the client to read (or for done).
type lineStream struct {
	stop      func()
	done      <-chan struct{} // closed when the batch stops: push waits no more
	conn      net.Conn        // the client's; its write deadline bounds a client that stops reading
	writeIdle time.Duration   // how long a client may leave a chunk unread

	mu      sync.Mutex
	pending []byte
	ended   bool          // no more lines will come
	ready   chan struct{} // signalled (capacity 1) when pending grows or the stream ends
	room    chan struct{} // signalled (capacity 1) when pending shrinks below maxPending
}

// maxPending bounds the bytes of lines a progress answer holds for its
// client: beyond it (by at most one line) the batch waits for the client.
const maxPending = 1 << 20

func newLineStream(conn net.Conn, writeIdle time.Duration, done <-chan struct{}, stop func()) *lineStream {
	return &lineStream{stop: stop, done: done, conn: conn, writeIdle: writeIdle,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// push queues one line (a newline is added). While maxPending bytes wait
// for the client it waits for the client to read some; if done closes
// meanwhile, the line is dropped.
func (ls *lineStream) push(line []byte) {
	for {
		ls.mu.Lock()
		if len(ls.pending) < maxPending {
			ls.pending = append(append(ls.pending, line...), '\n')
			more := len(ls.pending) < maxPending
			ls.mu.Unlock()
			if more {
				notify(ls.room) // another push may be waiting
			}
			ls.signal()
			return
		}
		ls.mu.Unlock()
		select {
		case <-ls.room:
		case <-ls.done:
			return
		}
	}
}

// notify signals c, a channel of capacity 1, without waiting.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// end marks the last line pushed.
func (ls *lineStream) end() {
	ls.mu.Lock()
	ls.ended = true
	ls.mu.Unlock()
	ls.signal()
}

func (ls *lineStream) signal() { notify(ls.ready) }

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
			notify(ls.room)
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
