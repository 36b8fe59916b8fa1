package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/proc"
)

// The fasthttp floor: the overhead scenario's fourth target, the smallest
// correct reverse proxy fasthttp makes. A handler passes the request to a
// keep-alive HostClient and writes the answer back: a JSON body whole, an
// SSE stream relayed as fasthttp relays a body stream, a flushed chunk per
// upstream read. It has no queue, no lanes, no controller, no header rewriting,
// no client watch and fasthttp's default settings (no ReduceMemoryUsage):
// what is left is what fasthttp and the Go runtime cost. Governor's CPU
// per call above it is Governor's own work; its distance to nginx is the
// distance of the stack Governor is built on.
//
// It runs as a process of its own, so that /proc counts its CPU and memory
// alone: govbench executes itself with floorProxyEnv set, and serves.

// floorProxyEnv, when set to "LISTEN UPSTREAM" (two host:port), makes
// govbench serve as the floor proxy instead of benchmarking.
const floorProxyEnv = "GOVBENCH_FASTHTTP_PROXY"

// targetFasthttp names the floor proxy in the overhead tables.
const targetFasthttp = "fasthttp"

// serveFloorProxy serves until ctx ends. spec is floorProxyEnv's value.
func serveFloorProxy(ctx context.Context, spec string) error {
	listen, upstream, ok := strings.Cut(spec, " ")
	if !ok || listen == "" || upstream == "" {
		return fmt.Errorf("%s=%q: want \"LISTEN UPSTREAM\"", floorProxyEnv, spec)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("fasthttp proxy: %w", err)
	}
	srv := newFloorProxy(upstream)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), floorProxyDrainTimeout)
		defer cancel()
		_ = srv.ShutdownWithContext(sctx)
	}()
	return srv.Serve(ln)
}

// newFloorProxy returns the floor proxy's server, forwarding to upstream.
func newFloorProxy(upstream string) *fasthttp.Server {
	client := &fasthttp.HostClient{
		Addr:               upstream,
		MaxConns:           4096,
		StreamResponseBody: true, // an SSE answer is relayed as it comes
	}
	return &fasthttp.Server{
		Handler:         func(ctx *fasthttp.RequestCtx) { floorForward(ctx, client) },
		CloseOnShutdown: true,
	}
}

// floorForward sends ctx's request upstream and answers with what comes
// back.
func floorForward(ctx *fasthttp.RequestCtx, client *fasthttp.HostClient) {
	resp := fasthttp.AcquireResponse()
	if err := client.Do(&ctx.Request, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
		return
	}
	stream := resp.BodyStream()
	if stream == nil || !strings.HasPrefix(string(resp.Header.ContentType()), "text/event-stream") {
		// Body reads a streamed body whole.
		body := resp.Body()
		resp.Header.CopyTo(&ctx.Response.Header)
		ctx.Response.SetBody(body)
		fasthttp.ReleaseResponse(resp)
		return
	}
	resp.Header.CopyTo(&ctx.Response.Header)
	// fasthttp writes each Read of a body stream as one chunk and flushes
	// it, and closes the stream once the answer is written.
	ctx.Response.SetBodyStream(&relayedStream{resp: resp, body: stream}, -1)
}

// relayedStream is an upstream answer's body stream handed to the client's
// answer; closing it releases the upstream answer (and so its connection).
type relayedStream struct {
	resp *fasthttp.Response
	body io.Reader
}

func (r *relayedStream) Read(p []byte) (int, error) { return r.body.Read(p) }

func (r *relayedStream) Close() error {
	fasthttp.ReleaseResponse(r.resp)
	return nil
}

// floorProxy is a running floor proxy.
type floorProxy struct {
	*proc.Process
	url string
}

// startFloorProxy starts govbench itself as the floor proxy in front of
// upstream (a base URL such as http://127.0.0.1:PORT) and waits until a
// request through it reaches the provider's /stats.
func startFloorProxy(ctx context.Context, w *workspace, upstream string) (*floorProxy, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fasthttp proxy: %w", err)
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), floorProxyEnv+"="+addr+" "+strings.TrimPrefix(upstream, "http://"))
	p, err := startProcess(targetFasthttp, exe, nil, env, filepath.Join(w.dir, "fasthttp-proxy.log"))
	if err != nil {
		return nil, err
	}
	f := &floorProxy{Process: p, url: "http://" + addr}
	if err := p.WaitHTTP(ctx, f.url+"/stats"); err != nil {
		_ = p.Stop(stopTimeout)
		return nil, err
	}
	return f, nil
}

// floorProxyDrainTimeout bounds the floor proxy's shutdown.
const floorProxyDrainTimeout = 5 * time.Second
