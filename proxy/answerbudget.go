package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/valyala/fasthttp"
)

// bufferAnswer reads an answer whole, as bufferBody does, taking its bytes
// from budget (the answers', as large as the one request bodies take
// theirs from), so that the answers held at once are bounded as the
// requests are. An answer whose
// length is known and does not fit is not read; one of unknown length is
// read until the budget has no more room. Either is then passed on as a
// stream (stream true): what was read (partial), then the rest as it
// arrives, and a cut in the rest reaches the client, as a stream's does,
// instead of being retried. held is what was taken from budget (the
// capacity of the buffer the body is read into), to give back once the
// answer is written.
func bufferAnswer(resp *fasthttp.Response, limit int64, budget *bodyBudget) (held int64, partial []byte, stream bool, err error) {
	in := resp.BodyStream()
	if in == nil {
		return 0, nil, false, nil
	}
	if size := int64(resp.Header.ContentLength()); size >= 0 {
		switch {
		case size > limit:
			return 0, nil, false, bufferBody(resp, limit) // too large: says so
		case !budget.take(size):
			return 0, nil, true, nil
		}
		if err := readBody(resp, limit, size, nil); err != nil {
			budget.give(size)
			return 0, nil, false, err
		}
		return size, nil, false, nil
	}
	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	var body []byte
	fail := func(err error) (int64, []byte, bool, error) {
		budget.give(held)
		_ = resp.CloseBodyStream() // closes the connection: the body was not read to its end
		return 0, nil, false, err
	}
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			if int64(len(body)+n) > limit {
				return fail(fmt.Errorf("read upstream body: %w (more than %d bytes)", errResponseTooLarge, limit))
			}
			if len(body)+n > cap(body) {
				// Grow as append would (double up to 256 KiB, then by
				// a quarter), taking the whole new capacity from the
				// budget first: what is held is the buffer, not only
				// the bytes in it.
				grown := 2 * cap(body)
				if cap(body) >= 256<<10 {
					grown = cap(body) + cap(body)/4
				}
				size := max(len(body)+n, grown, 4<<10)
				if !budget.take(int64(size - cap(body))) {
					// These n bytes are read already: they go with
					// the rest, unaccounted (one read's worth).
					return held, append(body, buf[:n]...), true, nil
				}
				held += int64(size - cap(body))
				body = append(make([]byte, 0, size), body...)
			}
			body = append(body, buf[:n]...)
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return fail(fmt.Errorf("read upstream body: %w", rerr))
			}
			if cutChunked(resp) {
				return fail(fmt.Errorf("read upstream body: %w", errCutChunked))
			}
			if cutAtClose(resp, body) {
				return fail(fmt.Errorf("read upstream body: %w", errCutAtClose))
			}
			if err := resp.CloseBodyStream(); err != nil {
				budget.give(held)
				return 0, nil, false, fmt.Errorf("read upstream body: %w", err)
			}
			resp.SwapBody(body) // SetBodyRaw would be lost to the SwapBody of respond
			return held, nil, false, nil
		}
	}
}

// heldBody is the body of an answer read whole that took its bytes from
// the budget: fasthttp writes it from the answer's buffer after the
// handler returns, and Close, once it is written (or the client gone),
// gives the bytes back and releases the answer.
type heldBody struct {
	r      bytes.Reader
	resp   *fasthttp.Response
	budget *bodyBudget
	n      int64
}

var heldBodies = sync.Pool{New: func() any { return new(heldBody) }}

func (h *heldBody) Read(p []byte) (int, error) { return h.r.Read(p) }

// WriteTo writes what is left of the body to w in one write.
func (h *heldBody) WriteTo(w io.Writer) (int64, error) { return h.r.WriteTo(w) }

// Close gives the body's bytes back and releases the answer.
func (h *heldBody) Close() error {
	h.budget.give(h.n)
	h.r.Reset(nil)
	fasthttp.ReleaseResponse(h.resp)
	*h = heldBody{}
	heldBodies.Put(h)
	return nil
}
