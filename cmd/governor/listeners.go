package main

import (
	"time"

	"github.com/valyala/fasthttp"
)

// The admin listener's bounds. Probes and scrapes send one small request
// and read a small answer, so a connection that takes longer is not one.
const (
	adminMaxConnections = 64
	adminReadTimeout    = 5 * time.Second
	adminWriteTimeout   = 10 * time.Second
	adminIdleTimeout    = 30 * time.Second
)

// newAdminServer returns the server of the admin listener: its
// connections are few and short-lived, whoever opens them.
func newAdminServer(a *admin, maxConns int) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               a.handler,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		ReadTimeout:           adminReadTimeout,
		WriteTimeout:          adminWriteTimeout,
		IdleTimeout:           adminIdleTimeout,
		// Beyond it, fasthttp answers 503 and closes the connection.
		Concurrency: adminConnections(maxConns),
		Logger:      fasthttpDiscard{},
	}
}

// adminConnections is the bound on the admin listener's connections: 64,
// or the main listener's bound if that is lower.
func adminConnections(mainMax int) int {
	if mainMax > 0 {
		return min(mainMax, adminMaxConnections)
	}
	return adminMaxConnections
}

// maxConnections is the bound on client connections of the main listener:
// GOVERNOR_MAX_CONNECTIONS, or by default three quarters of the open-file
// limit, leaving the rest to upstream connections, the admin listener and
// files; at least 64. Zero when the limit is unknown (fasthttp's bound).
func maxConnections(configured int, openFiles uint64) int {
	if configured > 0 {
		return configured
	}
	if openFiles == 0 {
		return 0
	}
	return int(max(64, min(openFiles, 1<<30)*3/4))
}

// fasthttpDiscard drops fasthttp's own messages (a client's connection
// errors, a refused connection).
type fasthttpDiscard struct{}

func (fasthttpDiscard) Printf(string, ...any) {}
