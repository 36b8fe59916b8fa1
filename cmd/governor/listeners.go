package main

import (
	"math"
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
// connections are few and short-lived, whoever opens them. It serves an
// adminListener, which bounds them.
func newAdminServer(a *admin, maxConns int) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               serving(a.handler),
		ConnState:             adminConnState,
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		ReadTimeout:           adminReadTimeout,
		WriteTimeout:          adminWriteTimeout,
		IdleTimeout:           adminIdleTimeout,
		// The adminListener bounds the connections, and closes one to make
		// room; this bound, beyond which fasthttp answers 503, leaves room
		// for those still closing.
		Concurrency: 2 * adminConnections(maxConns),
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
// files, and at most one connection per connMemory of the memory limit
// (memLimit, 0 when none is known); at least 64. Zero when neither limit
// is known (fasthttp's bound).
func maxConnections(configured int, openFiles uint64, memLimit int64) int {
	if configured > 0 {
		return configured
	}
	if openFiles == 0 && memLimit <= 0 {
		return 0
	}
	n := uint64(math.MaxUint64)
	if openFiles > 0 {
		n = min(openFiles, 1<<30) * 3 / 4
	}
	if memLimit > 0 {
		n = min(n, uint64(memLimit)/connMemory)
	}
	return int(max(64, n))
}

// connMemory is the memory a client connection is allowed by default. An
// idle one takes about 6 KiB and one whose call waits about 9; one whose
// head is being read holds fasthttp's 16 KiB read buffer as well, about
// 25 KiB. (Request bodies and answers have budgets of their own.)
const connMemory = 32 << 10

// fasthttpDiscard drops fasthttp's own messages (a client's connection
// errors, a refused connection).
type fasthttpDiscard struct{}

func (fasthttpDiscard) Printf(string, ...any) {}
