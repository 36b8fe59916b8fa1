package main

import (
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// admin serves the probes and metrics on the admin listener, apart from the
// main listener so that probes answer even when the main one is saturated.
type admin struct {
	set   *metrics.Set
	ready *atomic.Bool // false until listening, and again once draining
}

func (a *admin) handler(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/healthz":
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("ok\n")
	case "/readyz":
		ctx.SetContentType("text/plain; charset=utf-8")
		if a.ready.Load() {
			ctx.SetBodyString("ready\n")
			return
		}
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString("not ready\n")
	case "/metrics":
		ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
		writeMetrics(ctx, a.set)
	default:
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString("not found: try /healthz, /readyz or /metrics\n")
	}
}
