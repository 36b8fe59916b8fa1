package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// errClientGone ends a stream whose client has disconnected.
var errClientGone = errors.New("client disconnected")

// streamBody passes an upstream body to the client as the upstream produces
// it. fasthttp's server reads it chunk by chunk, flushes each chunk, and
// closes it when the answer is written or the client has gone, always from
// the one goroutine that reads it (STYLE.md, fasthttp rule 4). Close
// releases the upstream response, so a client that leaves mid-stream closes
// the upstream connection.
//
// A client that leaves while the upstream is silent is noticed by a watch
// that peeks at the client socket every checkEvery; it never closes the
// stream itself, it only moves the upstream read deadline to now so that the
// reading goroutine's Read returns and that goroutine closes the stream.
// Holding the client's net.Conn past the handler is safe where holding the
// RequestCtx is not: fasthttp does not pool connections, and this body is
// closed before fasthttp is done with the connection.
type streamBody struct {
	resp   *fasthttp.Response
	stream io.Reader
	conn   net.Conn      // upstream connection, to move its read deadline
	idle   time.Duration // longest gap between two reads from upstream
	done   func()

	client     net.Conn // the client's connection, watched while streaming
	checkEvery time.Duration
	clientGone atomic.Bool

	// deadlineSet is when the idle deadlines were last moved; they are
	// moved again only once idle/deadlineSlack of them has passed.
	deadlineSet time.Time

	mu     sync.Mutex // guards closed and timer against the watch
	closed bool
	timer  *time.Timer

	closeOnce sync.Once
}

// watchClient starts the client watch. It must be called before the body is
// handed to fasthttp.
func (b *streamBody) watchClient() {
	if b.client == nil || b.conn == nil || b.checkEvery <= 0 {
		return
	}
	b.timer = time.AfterFunc(b.checkEvery, b.checkClient)
}

func (b *streamBody) checkClient() {
	gone := peerGone(b.client)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		// The upstream connection may already serve another call.
		return
	}
	if gone {
		b.clientGone.Store(true)
		_ = b.conn.SetReadDeadline(time.Now())
	}
	b.timer.Reset(b.checkEvery)
}

// deadlineSlack is how much of the idle timeout may pass before a Read
// moves the deadlines again: a stream of many small events would otherwise
// reset two timers per event. A silence is thus ended after between
// idle·(1-1/deadlineSlack) and idle.
const deadlineSlack = 16

// Read reads the next piece of the upstream body. Before reading it moves
// the connection's deadline to now+idle, replacing the attempt deadline
// fasthttp set for the response headers: a stream has no overall limit, only
// a limit on silence.
func (b *streamBody) Read(p []byte) (int, error) {
	if b.stream == nil {
		return 0, io.EOF
	}
	if now := time.Now(); b.conn != nil && b.idle > 0 && now.Sub(b.deadlineSet) >= b.idle/deadlineSlack {
		b.deadlineSet = now
		if err := b.conn.SetReadDeadline(now.Add(b.idle)); err != nil {
			return 0, err
		}
		// What this read returns is written to the client next: a client
		// that stops reading is given up after the same silence.
		if b.client != nil {
			_ = b.client.SetWriteDeadline(now.Add(b.idle))
		}
	}
	if b.clientGone.Load() {
		return 0, errClientGone
	}
	n, err := b.stream.Read(p)
	if err != nil && b.clientGone.Load() {
		err = errClientGone
	}
	return n, err
}

// Close releases the upstream response. When the body was not read to its
// end, fasthttp closes the upstream connection instead of reusing it.
func (b *streamBody) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		if b.timer != nil {
			b.timer.Stop()
		}
		b.mu.Unlock()
		_ = b.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(b.resp)
		if b.done != nil {
			b.done()
		}
	})
	return nil
}
