package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load: closed-loop clients, each with one call outstanding, that never
// retry. A call that fails is recorded as failed; whatever Governor does
// about 429s is Governor's.

// callResult is one call as its client saw it. Times are offsets from the
// start of the run.
type callResult struct {
	ID        string // X-Request-Id, when the call had one
	Start     time.Duration
	FirstByte time.Duration // first body byte
	End       time.Duration // body read whole
	Sent      bool          // false: the run ended before this call was sent
	Status    int           // 0 when the call got no answer
	Attempts  int           // X-Governor-Attempts; 0 when absent (direct, nginx)
	Err       error
}

func (r callResult) ok() bool { return r.Err == nil && r.Status >= 200 && r.Status < 300 }

// latency is the time from sending the call to the end of its answer.
func (r callResult) latency() time.Duration { return r.End - r.Start }

// ttfb is the time from sending the call to the first byte of its body.
func (r callResult) ttfb() time.Duration { return r.FirstByte - r.Start }

// chatBody is the request of every call: a small chat completion, streamed
// or not. mockllm's answer depends only on the body.
func chatBody(stream bool) []byte {
	return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one word."}],"stream":` +
		strconv.FormatBool(stream) + `}`)
}

// loadClient sends calls over keep-alive connections, one per client.
type loadClient struct {
	hc *http.Client
	tr *http.Transport
}

// maxDialing bounds connections being opened at once, so that thousands of
// clients starting together do not overflow a listen backlog.
const maxDialing = 256

// newLoadClient returns a client for conns concurrent calls to one host.
// It never retries a call that may have reached the server (net/http
// retries only idempotent requests, and a POST is not one).
func newLoadClient(conns int) *loadClient {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dialing := make(chan struct{}, maxDialing)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case dialing <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			defer func() { <-dialing }()
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        0, // no limit
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &loadClient{hc: &http.Client{Transport: tr}, tr: tr}
}

// close closes the idle connections, ending their goroutines.
func (c *loadClient) close() { c.tr.CloseIdleConnections() }

// request is one call to send: a POST of body to url.
type request struct {
	url    string
	body   []byte
	id     string      // X-Request-Id; empty for none
	header http.Header // more headers, such as X-Mock-Latency
}

// call sends one request and reads its answer whole, through buf.
func (c *loadClient) call(ctx context.Context, t0 time.Time, rq request, buf []byte) (r callResult) {
	r = callResult{ID: rq.id, Sent: true, Start: time.Since(t0)}
	defer func() { // r is the named result: this runs after every return
		r.End = time.Since(t0)
		if r.FirstByte == 0 {
			r.FirstByte = r.End
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rq.url, bytes.NewReader(rq.body))
	if err != nil {
		r.Err = err
		return r
	}
	for k, v := range rq.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if rq.id != "" {
		req.Header.Set("X-Request-Id", rq.id)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		r.Err = err
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	r.Attempts, _ = strconv.Atoi(resp.Header.Get("X-Governor-Attempts"))
	for {
		n, err := resp.Body.Read(buf)
		if r.FirstByte == 0 && (n > 0 || err != nil) {
			r.FirstByte = time.Since(t0)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.Err = fmt.Errorf("reading the answer: %w", err)
			break
		}
	}
	return r
}

// runCalls runs exactly n calls (index 0..n-1) on clients closed-loop
// clients and returns them by index. It returns when every client is done;
// when ctx ends the calls in progress are cancelled and the calls not yet
// sent are left with a zero callResult.
func runCalls(ctx context.Context, clients, n int, call func(ctx context.Context, i int, buf []byte) callResult) []callResult {
	results := make([]callResult, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				results[i] = call(ctx, i, buf)
			}
		})
	}
	wg.Wait()
	return results
}

// runUntil runs clients closed-loop clients that send calls until the
// offset until from t0 (a call in progress then is finished) or ctx ends,
// and returns every call made.
func runUntil(ctx context.Context, clients int, t0 time.Time, until time.Duration, call func(ctx context.Context, i int, buf []byte) callResult) []callResult {
	var (
		next atomic.Int64
		mu   sync.Mutex
		all  []callResult
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			var mine []callResult
			for ctx.Err() == nil && time.Since(t0) < until {
				mine = append(mine, call(ctx, int(next.Add(1)-1), buf))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// cancelled reports whether r failed only because govbench cancelled it.
func (r callResult) cancelled() bool {
	return errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded)
}
