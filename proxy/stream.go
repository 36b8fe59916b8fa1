package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/usage"
)

// errClientGone ends a stream whose client has disconnected.
var errClientGone = errors.New("client disconnected")

// streamBody passes an upstream body to the client as the upstream produces
// it. fasthttp's server copies it with WriteTo and closes it when the answer
// is written or the client has gone, always from the one goroutine that
// reads it (STYLE.md, fasthttp rule 4). Close releases the upstream
// response, so a client that leaves mid-stream closes the upstream
// connection.
//
// WriteTo coalesces the way nginx does: what one read from the upstream
// socket brought (many SSE events, often) goes to the client in one write,
// and that write happens just before the next read from the socket, the one
// that may block. No byte waits in Governor for more to arrive: whatever is
// pending is written out before the proxy waits on the upstream.
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
	conn   *trackedConn  // upstream connection, to move its read deadline; may be nil
	idle   time.Duration // longest gap between two reads from upstream
	done   func()

	client     net.Conn // the client's connection, watched while streaming
	checkEvery time.Duration
	clientGone atomic.Bool
	watching   bool // watchClient was called

	// deadlineSet is when the idle deadlines were last moved; they are
	// moved again only once idle/deadlineSlack of them has passed.
	deadlineSet time.Time

	// While WriteTo runs, buf[:pending] has been read from the upstream
	// and not yet written to w.
	w       io.Writer
	flusher interface{ Flush() error } // w, when writing to it does not flush
	buf     []byte
	pending int
	written int64 // bytes written to w
	werr    error // the first error writing to w
	rerr    error // the first error reading the upstream, io.EOF aside
	moved   bool  // beforeUpstreamRead wrote the pending bytes out during a read
	// ended says a Read has returned an error or io.EOF: the stream was
	// read to its end, or the end was found. A stream closed before
	// that was given up on the client's side (see end).
	ended bool

	// tokens reads the usage of the body as it passes, when countTokens;
	// overload watches the events for an overload error, when
	// watchOverload.
	tokens                     usage.Stream
	overload                   overloadWatch
	countTokens, watchOverload bool
	// json, if set, follows a JSON answer framed by its connection's
	// close alone, passed on as it arrives (too large for the answers'
	// budget): the close may have cut it.
	json *jsonEnd
	// ndjson, if set, follows an NDJSON stream framed by its
	// connection's close alone to its last line.
	ndjson *ndjsonEnd

	mu     sync.Mutex // guards closed and timer against the watch
	closed bool
	timer  *time.Timer

	closeOnce sync.Once
}

// watchClient starts the client watch, once. WriteTo starts it the first
// time the stream may wait on the upstream (see beforeUpstreamRead): a
// stream that the upstream has sent whole by then never waits, and pays for
// no timer. It is called only from the goroutine that reads the stream.
func (b *streamBody) watchClient() {
	if b.watching || b.client == nil || b.conn == nil || b.checkEvery <= 0 {
		return
	}
	b.watching = true
	// peerGone reads (peeks) the client socket: the request is read, and
	// the read deadline fasthttp set for it must not blind the watch.
	_ = b.client.SetReadDeadline(time.Time{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.timer = time.AfterFunc(b.checkEvery, b.checkClient)
	}
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
		b.ended = true
		return 0, io.EOF
	}
	if now := time.Now(); b.idle > 0 && now.Sub(b.deadlineSet) >= b.idle/deadlineSlack {
		if err := b.moveDeadlines(now); err != nil {
			return 0, err
		}
	}
	if b.clientGone.Load() {
		return 0, errClientGone
	}
	if b.w == nil {
		// Read outside WriteTo: no hook tells when the read may wait.
		b.watchClient()
	}
	n, err := b.stream.Read(p)
	if b.countTokens {
		_, _ = b.tokens.Write(p[:n])
	}
	if b.watchOverload {
		b.overload.write(p[:n])
	}
	if b.json != nil {
		b.json.write(p[:n])
	}
	if b.ndjson != nil {
		b.ndjson.write(p[:n])
	}
	if err != nil && b.clientGone.Load() {
		err = errClientGone
	}
	switch {
	case err != io.EOF:
	case b.conn != nil && cutChunked(b.resp):
		// Passed on as the end, the cut would look like a complete
		// answer to the client: its stream is aborted instead.
		err = errCutChunked
	case b.watchOverload && b.resp.Header.ContentLength() == -2 && b.overload.cutAtClose():
		// Framed by the connection's close alone, the stream cannot
		// say by its bytes whether it was cut; its events can.
		err = errCutBeforeLastEvent
	case b.json != nil && !b.json.whole():
		err = errCutAtClose
	case b.ndjson != nil && b.ndjson.cutAtClose():
		// The same, for an NDJSON stream and its last line.
		err = errCutBeforeLastEvent
	}
	if err != nil {
		b.ended = true
		if err != io.EOF && b.rerr == nil {
			b.rerr = err
		}
	}
	return n, err
}

// errCutBeforeLastEvent reports a stream framed by the close of its
// connection (no Content-Length, not chunked) that the upstream closed
// before the stream's last event (see overloadWatch), or an NDJSON stream
// closed before its last line (see ndjsonEnd).
var errCutBeforeLastEvent = errors.New("upstream closed the connection before the stream's last event")

// end says how the stream ended, for the access log, once it is closed:
// "done"; the type of the provider's error event that ended it
// ("overloaded_error"); "client_gone" (the client left or stopped
// reading, or its connection failed before the stream was read to its
// end: the headers could not be written to it); "silent" (the upstream
// said nothing for the idle timeout); or "cut" (the upstream broke the
// stream off).
func (b *streamBody) end() string {
	switch {
	case b.clientGone.Load() || errors.Is(b.rerr, errClientGone) || b.werr != nil || !b.ended:
		return "client_gone"
	case isNetTimeout(b.rerr):
		return "silent"
	case b.rerr != nil:
		return "cut"
	case b.overload.errType != "":
		return b.overload.errType
	}
	return "done"
}

// isNetTimeout reports whether err is, or wraps, a net.Error that timed
// out. The target errors.As fills escapes to the heap: it is declared only
// for an error, so that a stream that ended well costs no allocation.
func isNetTimeout(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// moveDeadlines gives the upstream connection's reads and the client
// connection's writes a deadline idle from now (none when idle is not
// positive). respond calls it before the headers are written; Read calls it
// again as time passes.
func (b *streamBody) moveDeadlines(now time.Time) error {
	b.deadlineSet = now
	var deadline time.Time
	if b.idle > 0 {
		deadline = now.Add(b.idle)
	}
	if b.conn != nil {
		if err := b.conn.SetReadDeadline(deadline); err != nil {
			return err
		}
	}
	// What a read returns is written to the client next: a client that
	// stops reading is given up after the same silence.
	if b.client != nil {
		_ = b.client.SetWriteDeadline(deadline)
	}
	return nil
}

// SupportsBodyWriteTo tells fasthttp to copy the body with WriteTo.
func (b *streamBody) SupportsBodyWriteTo() bool { return true }

// WriteTo copies the body to w, which is fasthttp's chunked writer (each
// Write is one chunk, flushed to the client) or, for a body of known size,
// the connection's bufio.Writer (flushed here). Bytes read from the upstream
// gather in a buffer; the buffer is written out when the next read would go
// to the upstream socket (see trackedConn.Read), when it is full, and at the
// end of the body. A body cut by an upstream error is passed on up to the
// cut, then the error is returned.
func (b *streamBody) WriteTo(w io.Writer) (int64, error) {
	if b.stream == nil {
		b.ended = true
		return 0, nil
	}
	bufp := copyBufs.Get().(*[]byte)
	b.w, b.buf, b.pending = w, *bufp, 0
	b.flusher, _ = w.(interface{ Flush() error })
	if b.conn != nil {
		b.conn.stream = b
	}
	defer func() {
		if b.conn != nil {
			b.conn.stream = nil
		}
		b.w, b.flusher, b.buf = nil, nil, nil
		copyBufs.Put(bufp)
	}()
	for {
		if b.pending == len(b.buf) {
			if err := b.writePending(); err != nil {
				return b.written, err
			}
		}
		start := b.pending
		b.moved = false
		n, err := b.Read(b.buf[start:])
		if b.moved {
			// The bytes pending before this read were written out while
			// it waited; what it read goes to the front.
			b.pending = copy(b.buf, b.buf[start:start+n])
		} else {
			b.pending = start + n
		}
		if b.werr != nil {
			return b.written, b.werr
		}
		if err != nil {
			if werr := b.writePending(); werr != nil {
				return b.written, werr
			}
			if errors.Is(err, io.EOF) {
				return b.written, nil
			}
			return b.written, err
		}
	}
}

// beforeUpstreamRead is called by the upstream connection before it reads
// from its socket while WriteTo runs: the pending bytes go to the client
// before the proxy may wait on the upstream. An error writing them fails
// that read, which ends the stream.
func (b *streamBody) beforeUpstreamRead() error {
	b.watchClient()
	if b.pending == 0 {
		return nil
	}
	b.moved = true
	return b.writePending()
}

// writePending writes the pending bytes to the client and flushes them.
func (b *streamBody) writePending() error {
	if b.werr != nil || b.pending == 0 {
		return b.werr
	}
	n, err := b.w.Write(b.buf[:b.pending])
	b.written += int64(n)
	b.pending = 0
	if err == nil && b.flusher != nil {
		err = b.flusher.Flush()
	}
	b.werr = err
	return err
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
