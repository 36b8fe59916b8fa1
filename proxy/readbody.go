package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Reading an upstream answer's body whole, inside its attempt, under a
// size limit, and telling a complete body from one the upstream cut.

// errCutChunked reports a chunked answer whose connection the upstream
// closed between two chunks, before the last (empty) one.
var errCutChunked = errors.New("upstream closed the connection before the end of a chunked body")

// cutChunked reports whether resp's body, which fasthttp's stream has just
// ended with io.EOF, was cut rather than complete: it is chunked and the
// upstream closed the connection. fasthttp reads a connection closed where
// the next chunk's size should be as the body's end; after the last chunk
// it reads no further, so a complete body never sees the close. Call it
// before the body stream is closed.
func cutChunked(resp *fasthttp.Response) bool {
	if resp.Header.ContentLength() != -1 {
		return false
	}
	c := connOf(resp)
	return c != nil && c.peerClosed
}

// errCutAtClose reports a JSON answer framed by its connection's close
// alone that the upstream closed before the JSON's end.
var errCutAtClose = errors.New("upstream closed the connection before the end of a JSON answer")

// cutAtClose reports whether body, an answer read until the upstream
// closed the connection (no Content-Length, not chunked), was cut: its
// framing cannot say, so a JSON answer that is not whole JSON was.
// Answers of other types, or compressed, are taken as they came.
func cutAtClose(resp *fasthttp.Response, body []byte) bool {
	return resp.Header.ContentLength() == -2 && identityEncoded(resp) &&
		mediaTypeIs(resp.Header.ContentType(), "application/json") && !json.Valid(body)
}

// copyBufs are the buffers bufferBody copies through: io.Copy would
// allocate 32 KiB per call.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// bodyBufs hold the bodies bufferBody gathers; one that grew beyond
// bufferResponseBytes is not kept.
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// growToward returns body with room for n more bytes, its capacity doubled
// but no more than size, the length the body announced, once it holds
// them.
func growToward(body []byte, n int, size int64) []byte {
	c := max(2*cap(body), len(body)+n, 16<<10)
	if int64(c) > size && int64(len(body)+n) <= size {
		c = int(size)
	}
	return append(make([]byte, 0, c), body...)
}

// errResponseTooLarge reports an upstream answer larger than Governor buffers.
var errResponseTooLarge = errors.New("upstream response too large")

// bufferStream reads a streamed answer whole, as bufferBody does, under a
// limit on each silence of the upstream (idle; none when not positive),
// and shows its bytes to w as they arrive: one pass over its lines tells
// its keep-alives from its content, its last event and an error event.
// Keep-alives are silence: nobody reads this stream as it comes, so they
// keep nothing alive. A stream that carries content has no overall limit:
// the attempt's deadline bounds the wait for its head only, so a long
// generation is never cut and sent again. The limit lasts until the
// connection's next exchange begins (see trackedConn.SetWriteDeadline).
func bufferStream(resp *fasthttp.Response, limit int64, idle time.Duration, w *overloadWatch) error {
	c := connOf(resp)
	if c != nil {
		c.idle, c.heard = max(idle, 0), time.Now()
	}
	return readBody(resp, limit, 0, func(p []byte) {
		if w.write(p) && c != nil {
			c.heard = time.Now()
		}
	})
}

// bufferBody reads a streamed response body of at most limit bytes into the
// response and closes the stream, so the connection goes back to the pool.
//
// The body gathers in a buffer of its own and goes into the response once
// the stream is closed: AppendBody (and SetBody) close the stream first,
// which, for a body not read to its end, closes the connection, and the
// next read fails.
//
// A body of announced length grows toward that length as its bytes arrive
// (doubling, never past it): an upstream that announces more than it sends
// gets no more room than about twice what it sent.
func bufferBody(resp *fasthttp.Response, limit int64) error {
	return readBody(resp, limit, 0, nil)
}

// readBody is bufferBody for a caller that holds room for reserved bytes
// (from a budget): a body announcing at most that many is read into one
// buffer of its announced size at once.
//
// seen, if set, is shown each read's bytes as they arrive.
func readBody(resp *fasthttp.Response, limit, reserved int64, seen func([]byte)) error {
	stream := resp.BodyStream()
	if stream == nil {
		return nil
	}
	size := int64(resp.Header.ContentLength())
	if size > limit {
		// Known to be too large: nothing to read.
		_ = resp.CloseBodyStream()
		return fmt.Errorf("read upstream body: %w (%d bytes, more than %d)", errResponseTooLarge, size, limit)
	}
	bufp, bodyp := copyBufs.Get().(*[]byte), bodyBufs.Get().(*[]byte)
	buf, body := *bufp, (*bodyp)[:0]
	if size > int64(cap(body)) && size <= reserved {
		// Of known length, and room held for it: one buffer of that
		// size, not a doubling one.
		body = make([]byte, 0, size)
	}
	var err error
	for {
		// Not io.CopyBuffer with an io.LimitReader: that costs an
		// allocation per call.
		n, rerr := stream.Read(buf)
		if seen != nil && n > 0 {
			seen(buf[:n])
		}
		if len(body)+n > cap(body) && size > 0 {
			body = growToward(body, n, size)
		}
		body = append(body, buf[:n]...)
		if int64(len(body)) > limit {
			err = errResponseTooLarge
			break
		}
		if rerr != nil {
			switch {
			case !errors.Is(rerr, io.EOF):
				err = rerr
			case cutChunked(resp):
				err = errCutChunked
			case cutAtClose(resp, body):
				err = errCutAtClose
			case ndjsonCutAtClose(resp, body):
				err = errCutBeforeLastEvent
			}
			break
		}
	}
	copyBufs.Put(bufp)
	// CloseBodyStream returns the connection to the pool when the body was
	// read to its end and closes it otherwise.
	if cerr := resp.CloseBodyStream(); err == nil && cerr != nil {
		err = cerr
	}
	if !errors.Is(err, errResponseTooLarge) { // nobody reads what is too large
		// The response takes the buffer, and its own empty one goes to
		// the pool: the body is not copied.
		body = resp.SwapBody(body)[:0]
	}
	if cap(body) <= bufferResponseBytes {
		*bodyp = body
		bodyBufs.Put(bodyp)
	}
	if errors.Is(err, errResponseTooLarge) {
		return fmt.Errorf("read upstream body: %w (more than %d bytes)", err, limit)
	}
	if err != nil {
		return fmt.Errorf("read upstream body: %w", err)
	}
	return nil
}
