package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// accessRecord is what the access log says of one forwarded call. It holds
// copies: a streamed call's line is written once its stream has ended.
type accessRecord struct {
	method, path string
	lane         string
	code         int
	details      Details
	bytesIn      int
	requestID    string
	start        time.Time
	// streamEnd says how a stream passed on ended (see streamBody.end);
	// empty for an answer written whole.
	streamEnd string
}

// newAccessRecord copies what the access log needs from ctx, once its
// answer's status and headers are set. The path is logged without its query,
// which may carry a credential (?key=…).
func newAccessRecord(ctx *fasthttp.RequestCtx, laneID string, d *Details) *accessRecord {
	id := requestID(&ctx.Response.Header)
	if id == "" {
		id = string(ctx.Request.Header.Peek("X-Request-Id"))
	}
	return &accessRecord{
		method:    string(ctx.Method()),
		path:      string(ctx.Path()),
		lane:      laneID,
		code:      ctx.Response.StatusCode(),
		details:   *d,
		bytesIn:   len(ctx.Request.Body()),
		requestID: id,
		start:     ctx.Time(),
	}
}

// logAccess writes rec's line, bytesOut being the size of the answer's
// body as sent.
func (p *Proxy) logAccess(rec *accessRecord, bytesOut int64) {
	d := &rec.details
	var attrs [14]slog.Attr
	a := append(attrs[:0],
		slog.String("method", rec.method),
		slog.String("path", rec.path),
		slog.String("lane", rec.lane),
		slog.Int("code", rec.code),
		slog.String("status", string(d.Status)),
		slog.Int("attempts", d.Attempts),
		slog.Int64("queue_ms", d.Queue.Milliseconds()),
		slog.Int64("upstream_ms", d.Execution.Milliseconds()),
		slog.Int64("duration_ms", p.cfg.Now().Sub(rec.start).Milliseconds()),
		slog.Int("bytes_in", rec.bytesIn),
		slog.Int64("bytes_out", bytesOut),
		slog.String("request_id", rec.requestID),
	)
	if rec.streamEnd != "" {
		a = append(a, slog.String("stream_end", rec.streamEnd))
	}
	if len(d.Errors) > 0 {
		// What went wrong at each failed attempt, the last one's being
		// why a FAILED call failed.
		a = append(a, slog.Any("errors", d.Errors))
	}
	p.cfg.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "call", a...)
}
