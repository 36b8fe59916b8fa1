package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/llmgovernor/governor/mockllm"
	"github.com/llmgovernor/governor/proxy"
)

// demoProvider is the simulated provider -demo runs in-process: a rate limit
// low enough that a burst of calls shows Governor queueing them.
var demoProvider = mockllm.Config{
	Latency:       300 * time.Millisecond,
	LatencySpread: 0.2,
	ChunkDelay:    50 * time.Millisecond,
	Rate:          20,
	Burst:         10,
}

// startDemo starts the simulated provider on a loopback port and points the
// configuration at it: the default upstream and an "anthropic" route.
// The returned function stops it.
func startDemo(p *parsed) (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo provider: %w", err)
	}
	mock := mockllm.New(demoProvider)
	srv := &http.Server{Handler: mock, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on stop
	base := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	p.upstream.URL = base
	p.routes = []proxy.Route{{Name: "anthropic", URL: base}}
	return func() {
		mock.Close()
		srv.Close()
	}, nil
}

func printDemo(w io.Writer, listen string) {
	base := "http://" + listen
	fmt.Fprintf(w, `Governor demo: a simulated provider (%.0f calls/s, burst %d) behind Governor on %s.

  export OPENAI_BASE_URL=%s/v1 OPENAI_API_KEY=demo
  export ANTHROPIC_BASE_URL=%s/anthropic ANTHROPIC_API_KEY=demo

  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}'

  Watch it: %s/governor/ui

`, demoProvider.Rate, demoProvider.Burst, base, base, base, base, base)
}
