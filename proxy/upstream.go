package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream is one provider endpoint Governor forwards to: the default
// upstream or a named prefix route. It owns one fasthttp.HostClient
// (STYLE.md, fasthttp rule 7) configured to stream response bodies, never to
// retry on its own (an LLM POST is not idempotent; the retry loop owns
// retries), and to dial through trackedConn so that the proxy can move a
// connection's read deadline while it streams a body.
type upstream struct {
	name      string // route name, or "default"; used in metric labels
	url       *url.URL
	scheme    string
	host      string // Host header value sent upstream
	basePath  string // path of the upstream URL without its trailing slash
	anthropic bool   // Governor's own errors use Anthropic's shape
	client    *fasthttp.HostClient
	metrics   *routeMetrics
	// connecting, if set, is told of each connection being opened to the
	// upstream (lane.Registry.Connecting), before its dial.
	connecting func() (done func(opened bool))

	connsMu sync.Mutex
	conns   map[*trackedConn]struct{} // open connections, to cut them at the end of a drain
}

func newUpstream(name string, u *url.URL, cfg *Config) *upstream {
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	var tlsConfig *tls.Config
	if u.Scheme == "https" {
		if cfg.TLSConfig != nil {
			tlsConfig = cfg.TLSConfig.Clone()
		} else {
			tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = u.Hostname()
		}
	}
	up := &upstream{
		name:      name,
		url:       u,
		scheme:    u.Scheme,
		host:      u.Host,
		basePath:  strings.TrimSuffix(u.EscapedPath(), "/"),
		anthropic: name == "anthropic" || strings.HasSuffix(u.Hostname(), "anthropic.com"),
		conns:     map[*trackedConn]struct{}{},
	}
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	up.client = &fasthttp.HostClient{
		Addr:                      addr,
		IsTLS:                     u.Scheme == "https",
		TLSConfig:                 tlsConfig,
		NoDefaultUserAgentHeader:  true, // the client's User-Agent passes through unchanged
		DisablePathNormalizing:    true, // the front already normalized the path
		StreamResponseBody:        true,
		MaxConns:                  cfg.MaxConnsPerUpstream,
		MaxConnWaitTimeout:        cfg.ConnectTimeout,
		MaxIdleConnDuration:       cfg.IdleConnTimeout,
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		ReadBufferSize:            responseHeaderBufferSize,
		// fasthttp's errors would otherwise quote the bytes of a head it
		// could not read (too large, malformed): the provider's headers,
		// which may carry anything, would reach the client's error body.
		SecureErrorLogMessage: true,
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			if timeout <= 0 || timeout > cfg.ConnectTimeout {
				timeout = cfg.ConnectTimeout
			}
			deadline := time.Now().Add(timeout)
			d := *dialer
			d.Timeout = timeout
			done := func(bool) {}
			if up.connecting != nil {
				done = up.connecting()
			}
			c, err := d.Dial("tcp", addr)
			done(err == nil)
			if err != nil {
				return nil, err
			}
			tc := up.track(newTrackedConn(c, cfg.Now))
			if tlsConfig != nil {
				return handshake(tc, c, tlsConfig, deadline)
			}
			return tc, nil
		},
	}
	return up
}

// handshake runs the TLS handshake over tc, whose socket is c, by
// deadline. fasthttp would run it with the request's write deadline, but
// it takes a connection that has a Handshake method as TLS already, and
// the write deadline does not bound the reads of a handshake made on the
// first write: an upstream that took the connection and never answered
// the handshake held the call forever.
func handshake(tc *trackedConn, c net.Conn, config *tls.Config, deadline time.Time) (net.Conn, error) {
	// On the socket: tc's own deadline setters mark exchanges.
	if err := c.SetDeadline(deadline); err != nil {
		tc.Close()
		return nil, err
	}
	conn := tls.Client(tc, config)
	if err := conn.Handshake(); err != nil {
		tc.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		tc.Close()
		return nil, err
	}
	// As fasthttp would wrap it, but seeing the TLS layer's end.
	tc.tls = true // its answers' heads are scanned by tlsConn
	return &tlsConn{Conn: conn, tracked: tc}, nil
}

// tlsConn is the TLS session over an upstream's tracked connection. It
// tells the tracked connection when the session ends (io.EOF): a
// close_notify ends it before the socket's close is read, and a chunked
// body cut right there would otherwise look complete (see cutChunked).
type tlsConn struct {
	*tls.Conn
	tracked *trackedConn
	ended   bool // the session's end came with the last bytes read
}

// Read reads from the TLS session; its end is the peer closing. TLS 1.2
// reads a close_notify queued behind a record at once and returns its end
// with that record's bytes, which may complete the body or not: the end
// is then returned by the next read, which only a body that needs more
// bytes makes.
func (c *tlsConn) Read(p []byte) (int, error) {
	if c.ended {
		c.tracked.peerClosed = true
		return 0, io.EOF
	}
	if c.tracked.answerHead.bareLF {
		return 0, errBareLFAnswer
	}
	n, err := c.Conn.Read(p)
	c.tracked.answerHead.scan(p[:n])
	if err == io.EOF {
		if n > 0 {
			c.ended = true
			return n, nil
		}
		c.tracked.peerClosed = true
	}
	return n, err
}

// responseHeaderBufferSize bounds the size of an upstream's response headers.
// Providers send many rate-limit and tracing headers; fasthttp's 4 KiB
// default is too tight for some of them.
const responseHeaderBufferSize = 32 << 10

// trackedConn is an upstream connection whose read deadline the proxy can
// move after fasthttp has set it.
//
// fasthttp applies a request's deadline to the connection and leaves it in
// force while a streamed body is read (STYLE.md, fasthttp rule 5). That is
// right for the wait for response headers (the attempt timeout) and wrong for
// a generation that streams for many minutes. The connection is found from
// the response through the address fasthttp records with ParseNetConn:
// LocalAddr returns a connAddr that points back to its connection, which
// holds for TLS connections too because tls.Conn delegates LocalAddr.
type trackedConn struct {
	net.Conn
	addr    net.Addr         // the socket's local address
	now     func() time.Time // the clock of connAddr.handed
	onClose func(*trackedConn)
	once    sync.Once

	// exchange is the address LocalAddr gave out last: that of the
	// exchange that begins next (see SetWriteDeadline).
	exchange atomic.Pointer[connAddr]

	// stream, while a streamed body is passed to a client, is told before
	// every read from the socket, i.e. whenever what the upstream sent so
	// far has all been read (see streamBody.WriteTo). Only the goroutine
	// that reads the connection sets, clears and calls it.
	stream *streamBody

	// owner is the client watch of the attempt whose request was last
	// written to the connection (see watchedClient.takeOff); severed says
	// that watch has cut the attempt. A new exchange on the connection
	// clears both before its request is written (see SetWriteDeadline), so
	// a watch whose attempt has ended never cuts the next call's.
	ownerMu sync.Mutex
	owner   *watchedClient
	severed atomic.Bool

	// used says an exchange has begun on the connection; only the
	// goroutine that writes to it (fasthttp's) reads and sets it, and
	// peeker.
	used   bool
	peeker *peeker

	// spoiled says the connection's framing is in doubt: its last answer
	// ended at its head but framed a body (see framesSkippedBody), or was
	// a 101 (see send). The next exchange refuses it.
	spoiled atomic.Bool

	// peerClosed says a read of the exchange found the connection closed
	// by the upstream (io.EOF): a chunked body that ends there was cut
	// (see cutChunked). Only the goroutine that reads the connection
	// sets and reads it; a new exchange clears it.
	peerClosed bool

	// answerHead scans the head of the exchange's answer as it is read
	// (see headScan), from the plain bytes: tlsConn's when tls is set.
	// Only the goroutine that reads the connection uses it; a new
	// exchange starts it again.
	answerHead headScan
	tls        bool

	// idle, while a stream is read whole (see bufferStream), sets the
	// read deadline before each read that long after heard, when the
	// stream last carried content (keep-alive events do not count). Only
	// the goroutine that reads the connection sets and reads them; a new
	// exchange clears them (the stream's reader cannot: reading the
	// stream to its end puts the connection back in the pool, for another
	// goroutine to take).
	idle  time.Duration
	heard time.Time
}

// Read reads from the connection, first letting a stream in progress pass
// on what it holds: the read may block. A read of an attempt that was cut
// fails.
func (c *trackedConn) Read(p []byte) (int, error) {
	if c.idle > 0 {
		// Before the check below: a cut that comes after it sets its
		// own deadline after this one.
		_ = c.Conn.SetReadDeadline(c.heard.Add(c.idle))
	}
	if c.severed.Load() {
		// The cut may have come before fasthttp set the deadline for
		// the answer, which replaced the cut's.
		return 0, errClientLeft
	}
	if s := c.stream; s != nil {
		if err := s.beforeUpstreamRead(); err != nil {
			return 0, err
		}
	}
	if c.answerHead.bareLF {
		return 0, errBareLFAnswer
	}
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.peerClosed = true
	}
	if !c.tls {
		c.answerHead.scan(p[:n])
	}
	return n, err
}

// errBareLFAnswer fails the reads of an answer whose head has a line that
// ends in a bare LF (see headScan): fasthttp would wait for the rest of a
// head that has ended until the attempt's deadline, and the controller
// would hear a provider too slow to answer.
var errBareLFAnswer = errors.New("upstream answer head line ends in a bare LF, not CR LF")

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose(c)
		}
	})
	return c.Conn.Close()
}

// SetWriteDeadline sets the write deadline. fasthttp sets it first
// thing in every exchange on the connection (HostClient's transport, before
// writing the request), which is how the connection knows that a new
// exchange begins and the previous one's owner has no say over it.
//
// On a connection that carried an exchange before, it first makes sure the
// upstream has not closed it while it was idle (servers close idle
// keep-alive connections after a few seconds: uvicorn after 5), and fails
// with errStaleConn if it has, or sent anything unasked (a TLS
// close_notify), or if its framing is in doubt (spoiled): nothing is
// written, and fasthttp tries another connection. (fasthttp does not watch idle connections, and a request
// written to one the server has closed fails only once written.)
func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.ownerMu.Lock()
	c.owner = nil
	c.severed.Store(false)
	c.ownerMu.Unlock()
	if c.spoiled.Load() {
		return errStaleConn
	}
	if c.used {
		// The last exchange's read deadline may have passed, which
		// would keep the socket from being looked at; fasthttp sets
		// this exchange's after writing the request.
		_ = c.Conn.SetReadDeadline(time.Time{})
		if waiting, gone := c.peeker.peek(); waiting || gone {
			return errStaleConn
		}
	}
	c.used = true
	c.peerClosed = false
	c.idle, c.heard = 0, time.Time{}
	c.answerHead.start()
	if a := c.exchange.Load(); a != nil && a.handed.IsZero() {
		a.handed = c.now()
	}
	return c.Conn.SetWriteDeadline(t)
}

// errStaleConn refuses an exchange on an idle connection the upstream has
// closed (see trackedConn.SetWriteDeadline).
var errStaleConn = errors.New("upstream closed the idle connection")

// send makes one exchange of req with the upstream, answered in resp by
// deadline. An exchange refused on an idle connection the upstream had
// closed (errStaleConn: nothing was written) is made again at once on
// another one, wc, if set, first carrying req's body again (fasthttp does
// not retry a request with a body stream). Each refusal closes a
// connection, so MaxConns+1 tries reach a new one.
func (up *upstream) send(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, wc *watchedClient) error {
	err := up.client.DoDeadline(req, resp, deadline)
	for n := 0; errors.Is(err, errStaleConn) && n < up.client.MaxConns; n++ {
		if wc != nil {
			wc.carryBody(req, resp)
		}
		err = up.client.DoDeadline(req, resp, deadline)
	}
	switch {
	case err != nil:
	case resp.StatusCode() == fasthttp.StatusSwitchingProtocols:
		// Governor forwards no Upgrade header, so the upstream
		// switched protocols unasked: what follows on the connection
		// is no HTTP answer to anyone, and this is no answer either.
		spoil(resp)
		return errUnaskedUpgrade
	case framesSkippedBody(&resp.Header, req.Header.IsHead()):
		spoil(resp)
	}
	return err
}

// spoil marks the connection resp came on as one whose framing is in
// doubt. fasthttp has already put it back in its pool: the next exchange
// refuses it.
func spoil(resp *fasthttp.Response) {
	if c := connOf(resp); c != nil {
		c.spoiled.Store(true)
	}
}

// own makes w the owner of the exchange whose request is being written.
func (c *trackedConn) own(w *watchedClient) {
	c.ownerMu.Lock()
	c.owner = w
	c.severed.Store(false)
	c.ownerMu.Unlock()
}

// cut ends the exchange of w's attempt, if it still runs on c: reads fail
// and a read in progress returns at once. fasthttp then closes the
// connection, which tells the provider.
func (c *trackedConn) cut(w *watchedClient) {
	c.ownerMu.Lock()
	defer c.ownerMu.Unlock()
	if c.owner != w {
		return
	}
	c.severed.Store(true)
	_ = c.Conn.SetReadDeadline(time.Now())
}

func (up *upstream) track(c *trackedConn) *trackedConn {
	c.onClose = up.forget
	up.connsMu.Lock()
	up.conns[c] = struct{}{}
	up.connsMu.Unlock()
	return c
}

func (up *upstream) forget(c *trackedConn) {
	up.connsMu.Lock()
	delete(up.conns, c)
	up.connsMu.Unlock()
}

// cutConnections closes every open connection to the upstream, idle or
// busy: calls in flight end at once with a connection error. Only for the
// end of a drain that ran out of time.
func (up *upstream) cutConnections() {
	for _, c := range up.openConns() {
		_ = c.Conn.Close() // the owner's Close forgets it later
	}
}

// openConns returns the upstream's open connections, idle or busy.
func (up *upstream) openConns() []*trackedConn {
	up.connsMu.Lock()
	defer up.connsMu.Unlock()
	conns := make([]*trackedConn, 0, len(up.conns))
	for c := range up.conns {
		conns = append(conns, c)
	}
	return conns
}

// connAddr is the local address of an upstream connection as one exchange
// on it sees it: fasthttp records it in the exchange's response (with
// ParseNetConn) once it has the connection for the exchange, just before
// it begins the exchange (see SetWriteDeadline). It leads from a response
// to its connection (connOf), and says when the exchange's request was
// handed to that connection (handedAt).
type connAddr struct {
	net.Addr
	conn *trackedConn
	// handed is when the exchange began: its request was handed to conn,
	// after any wait for a free connection and the opening of a new one.
	// Zero if the connection refused it (errStaleConn): it was never
	// written.
	handed time.Time
}

// newTrackedConn tracks c; now is the clock that times its exchanges
// (nil: time.Now).
func newTrackedConn(c net.Conn, now func() time.Time) *trackedConn {
	if now == nil {
		now = time.Now
	}
	return &trackedConn{Conn: c, peeker: newPeeker(c), addr: c.LocalAddr(), now: now}
}

// LocalAddr returns the connection's local address, as a connAddr of its
// own for the exchange about to begin (fasthttp asks once per exchange, as
// it takes the connection for it).
//
// It allocates one each time, on purpose: the response keeps its connAddr
// after the connection has gone back to the pool (an answer read whole
// returns it before DoDeadline does), and the next exchange, on another
// goroutine, must not move the handed of an exchange whose timing is still
// to be read (see handedAt).
func (c *trackedConn) LocalAddr() net.Addr {
	a := &connAddr{Addr: c.addr, conn: c}
	c.exchange.Store(a)
	return a
}

// connOf returns the upstream connection a response was read from, or nil.
func connOf(resp *fasthttp.Response) *trackedConn {
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		return a.conn
	}
	return nil
}

// handedAt returns when the exchange of resp was handed to its upstream
// connection, and false if it never was: fasthttp found no free
// connection, or could not open one, before the attempt's deadline (or
// the only connection it found refused the exchange). Read it on the
// goroutine that made the exchange, once it is over.
func handedAt(resp *fasthttp.Response) (time.Time, bool) {
	if a, ok := resp.LocalAddr().(*connAddr); ok && !a.handed.IsZero() {
		return a.handed, true
	}
	return time.Time{}, false
}
