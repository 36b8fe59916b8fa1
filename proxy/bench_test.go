package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/llmgovernor/governor/internal/reqmodel"
)

func benchRequest() *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI("/v1/chat/completions?x=1")
	req.Header.SetMethod("POST")
	req.Header.Set("Authorization", "Bearer sk-bench-0123456789")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("User-Agent", "OpenAI/JS 4.0")
	req.Header.Set("Priority", "u=2")
	req.SetBodyString(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello, how are you today?"}]}`)
	return req
}

// BenchmarkBuildUpstreamRequest measures header rewriting: copy, hop-by-hop
// stripping, Host and URI for the upstream; for a request built in code,
// and for one as the front reads it, without hop-by-hop headers (what SDKs
// send).
func BenchmarkBuildUpstreamRequest(b *testing.B) {
	parsed := fasthttp.AcquireRequest()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello, how are you today?"}]}`
	raw := "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: governor\r\nAuthorization: Bearer sk-bench-0123456789\r\n" +
		"Content-Type: application/json\r\nUser-Agent: OpenAI/JS 4.0\r\nPriority: u=2\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if err := parsed.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   *fasthttp.Request
	}{{"built", benchRequest()}, {"parsed", parsed}} {
		b.Run(c.name, func(b *testing.B) {
			up := &upstream{name: "default", scheme: "https", host: "api.openai.com"}
			out := fasthttp.AcquireRequest()
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				buildUpstreamRequest(c.in, up, []byte("/v1/chat/completions"), out)
			}
		})
	}
}

// TestBuildUpstreamRequestDoesNotAllocate guards the header rewriting of
// every call: a request whose Connection header names another header is
// rewritten for the upstream without an allocation. (The whole round trip
// goes through fasthttp's pools, which the race detector empties at
// random, so its allocations are counted by BenchmarkProxiedRoundTrip.)
func TestBuildUpstreamRequestDoesNotAllocate(t *testing.T) {
	in := benchRequest()
	defer fasthttp.ReleaseRequest(in)
	up := &upstream{name: "default", scheme: "https", host: "api.openai.com"}
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	path := []byte("/v1/chat/completions")
	buildUpstreamRequest(in, up, path, out) // out's buffers grow once
	allocs := testing.AllocsPerRun(100, func() {
		out.Reset()
		buildUpstreamRequest(in, up, path, out)
	})
	if allocs != 0 {
		t.Errorf("buildUpstreamRequest allocates %v times per call", allocs)
	}
	if len(out.Header.Peek("X-Hop")) != 0 || len(out.Header.Peek(fasthttp.HeaderConnection)) != 0 {
		t.Errorf("hop-by-hop headers left in the upstream request: %q", out.Header.Header())
	}
}

// BenchmarkLaneKey measures what choosing a lane costs per call: the
// credential hash and the model read from the body.
func BenchmarkLaneKey(b *testing.B) {
	req := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		_ = credentialHash(&req.Header)
		_ = reqmodel.Of(req.Body())
	}
}

// BenchmarkProxiedRoundTrip measures a whole call through the proxy (client
// over an in-memory listener, upstream on loopback) against the upstream
// answering at once.
func BenchmarkProxiedRoundTrip(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`)
	p := benchProxy(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	})
	ln := fasthttputil.NewInmemoryListener()
	benchRoundTrips(b, p, ln, ln.Dial, len(body))
}

// BenchmarkProxiedStreamRoundTrip measures a whole streamed call that
// ends as a chat completion stream does (10 SSE events, then [DONE], each
// a chunk of its own, flushed back to back by the upstream, as mockllm
// does; without [DONE] every call would be heard as a cut) and reports the
// writes to the client per call: what one read from the upstream brought
// leaves in one write, plus the headers and the end of the chunked body
// (one write per event before coalescing).
func BenchmarkProxiedStreamRoundTrip(b *testing.B) {
	done := []byte("data: [DONE]\n\n")
	p := benchProxy(b, eventStream(10, done))
	mem := fasthttputil.NewInmemoryListener()
	ln := &countingListener{Listener: mem}
	benchRoundTrips(b, p, ln, mem.Dial, 10*len(benchEvent)+len(done))
	b.ReportMetric(float64(ln.writes.Load())/float64(b.N), "writes/op")
}

// benchEvent is the event of the stream benchmarks' upstream: a chunk of
// a chat completion stream.
var benchEvent = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n")

// eventStream answers with an event stream of n benchEvents, each a
// chunk of its own, then last.
func eventStream(n int, last []byte) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStream(&chunkedEvents{event: benchEvent, n: n, last: last}, -1)
	}
}

// benchProxy starts an upstream on loopback that answers every call with
// h and returns a Proxy in front of it. The upstream shuts down when b
// ends.
func benchProxy(b *testing.B, h fasthttp.RequestHandler) *Proxy {
	b.Helper()
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	upSrv := &fasthttp.Server{Handler: h}
	go upSrv.Serve(upLn)                   //nolint:errcheck
	b.Cleanup(func() { upSrv.Shutdown() }) //nolint:errcheck
	p, err := New(Config{Upstream: mustURLb(b, "http://"+upLn.Addr().String()), Metrics: newSet()})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// benchRoundTrips serves p on ln and sends benchRequest through it from
// parallel clients that connect with dial, each answer a 200 of
// bodyLen bytes. The server shuts down when b ends.
func benchRoundTrips(b *testing.B, p *Proxy, ln net.Listener, dial func() (net.Conn, error), bodyLen int) {
	b.Helper()
	go p.Serve(ln)                            //nolint:errcheck
	b.Cleanup(func() { p.server.Shutdown() }) //nolint:errcheck
	c := &fasthttp.HostClient{Addr: "governor", Dial: func(string) (net.Conn, error) { return dial() }}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest()
		req.SetRequestURI("http://governor/v1/chat/completions")
		resp := fasthttp.AcquireResponse()
		for pb.Next() {
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 || len(resp.Body()) != bodyLen {
				b.Fatalf("%v %d %d", err, resp.StatusCode(), len(resp.Body()))
			}
		}
	})
}

// chunkedEvents is a body that fasthttp's server sends as n chunks of one
// event each, then last, in one write: it reads one event per Read.
type chunkedEvents struct {
	event, last []byte
	n           int
}

func (e *chunkedEvents) Read(p []byte) (int, error) {
	switch {
	case e.n > 0:
		e.n--
		return copy(p, e.event), nil
	case e.last != nil:
		n := copy(p, e.last)
		e.last = nil
		return n, nil
	}
	return 0, io.EOF
}

// BenchmarkAnswerBudgets measures reading the provider's budgets from an
// answer's headers (request budget, then token budgets), as each attempt
// does: an answer that reports none (most providers' JSON answers behind
// a proxy, and mockllm's without a bucket), and one with OpenAI's six.
func BenchmarkAnswerBudgets(b *testing.B) {
	plain := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 26 Nov 2026 08:00:00 GMT\r\n" +
		"X-Request-Id: req_0123456789\r\nOpenai-Processing-Ms: 120\r\nContent-Length: 2\r\n\r\n{}"
	openai := strings.Replace(plain, "Content-Length", "X-Ratelimit-Limit-Requests: 500\r\nX-Ratelimit-Remaining-Requests: 499\r\n"+
		"X-Ratelimit-Reset-Requests: 120ms\r\nX-Ratelimit-Limit-Tokens: 30000\r\nX-Ratelimit-Remaining-Tokens: 29000\r\n"+
		"X-Ratelimit-Reset-Tokens: 2s\r\nContent-Length", 1)
	now := time.Now()
	for _, c := range []struct{ name, raw string }{{"none", plain}, {"openai", openai}} {
		b.Run(c.name, func(b *testing.B) {
			var resp fasthttp.Response
			if err := resp.Read(bufio.NewReader(strings.NewReader(c.raw))); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = rateLimitHeaders(&resp.Header, now)
				_, _ = tokenBudgets(&resp.Header, now)
			}
		})
	}
}

// BenchmarkDetailHeaders measures adding a call's execution details to its
// answer's headers.
func BenchmarkDetailHeaders(b *testing.B) {
	var h fasthttp.ResponseHeader
	h.SetContentType("application/json")
	h.Set("X-Request-Id", "req_0123456789")
	d := &Details{Status: StatusCompletedWithRetries, Attempts: 2, Queue: 1234 * time.Millisecond}
	b.ReportAllocs()
	for b.Loop() {
		setDetailHeaders(&h, d)
	}
}

// BenchmarkClientConnRequestRead measures how a keep-alive connection of
// fasthttp's server with ReduceMemoryUsage reads a request that arrived
// whole: a one-byte Read, then a Read into a 16 KiB buffer. "socket" makes
// both on the socket (two system calls); "readahead" on a clientConn, whose
// first Read reads ahead (one).
func BenchmarkClientConnRequestRead(b *testing.B) {
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: governor\r\nAuthorization: Bearer sk-bench-0123456789\r\n" +
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100))
	for _, name := range []string{"socket", "readahead"} {
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer server.Close()
			var conn net.Conn = server
			if name == "readahead" {
				conn = &clientConn{TCPConn: server.(*net.TCPConn)}
			}
			first, buf := make([]byte, 1), make([]byte, 16<<10)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Write(req); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < len(req); {
					p := buf[:16<<10-1]
					if got == 0 {
						p = first
					}
					n, err := conn.Read(p)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}

// BenchmarkDoStream measures a call of Do (a batch item) whose answer is
// an event stream, read whole inside its attempt: its keep-alives, its
// last event and an error event are told as it is read.
func BenchmarkDoStream(b *testing.B) {
	done := []byte(": keep-alive\n\ndata: [DONE]\n\n")
	p := benchProxy(b, eventStream(10, done))
	defer p.Shutdown(context.Background()) //nolint:errcheck
	call := &Call{Path: "/v1/chat/completions", Header: map[string]string{"Authorization": "Bearer sk-bench-0123456789", "Content-Type": "application/json"},
		Body: []byte(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hello"}]}`), MaxRetries: -1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res := p.Do(context.Background(), call)
			if res.Err != nil || res.StatusCode != 200 || len(res.Body) != 10*len(benchEvent)+len(done) {
				b.Fatalf("%v %d %d", res.Err, res.StatusCode, len(res.Body))
			}
		}
	})
}
