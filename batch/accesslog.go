package batch

import (
	"context"
	"log/slog"
	"strings"
)

// logItem writes the access log line of item i once its row is recorded.
func (s *Server) logItem(e *execution, i int, r *Row) {
	it := &e.items[i]
	id := r.RequestID
	if id == "" {
		for k, v := range it.Header {
			if strings.EqualFold(k, "X-Request-Id") {
				id = v
			}
		}
	}
	code := r.StatusCode
	if code == 0 && r.Err != nil {
		code = r.Err.Status
	}
	s.cfg.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "batch item",
		slog.String("batch", e.id),
		slog.Int("item", i),
		slog.String("method", it.Method),
		slog.String("path", pathOnly(it.URL)),
		slog.String("lane", r.Lane),
		slog.Int("code", code),
		slog.String("status", string(r.Status)),
		slog.Int("attempts", r.Attempts),
		slog.Int64("queue_ms", r.Queue.Milliseconds()),
		slog.Int64("upstream_ms", r.Execution.Milliseconds()),
		slog.Int("bytes_in", len(it.Body)),
		slog.Int("bytes_out", len(r.Body)),
		slog.String("request_id", id),
	)
}

// pathOnly drops a query, which may carry a credential (?key=…).
func pathOnly(url string) string {
	p, _, _ := strings.Cut(url, "?")
	return p
}
