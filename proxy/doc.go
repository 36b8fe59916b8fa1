// Package proxy is Governor's front: a fasthttp server that forwards an
// application's LLM calls to their provider under governance, and the
// governed round trip that the batch API shares.
//
// # Use
//
// New returns a Proxy for a Config, each of whose fields says what its
// zero value means; its metrics go on Config.Metrics. Register Governor's
// own endpoints with HandleAPI and HandlePublic, then call Serve for each
// listener: it returns once Shutdown has been called. Do sends a call made
// by Governor itself (a batch item) through the same lanes, queues,
// controllers and retries as a forwarded call. Shutdown drains: it stops
// accepting, lets the calls in progress and the calls of Do end until its
// context does, answers those still waiting then with Governor's draining
// error, and stops what the Proxy runs in the background. Apart from
// HandleAPI and HandlePublic, which must come before Serve, the methods of
// a Proxy are safe for concurrent use.
//
// # Why a proxy
//
// Every process of a pod that calls a provider carries its own retry loop
// and concurrency knob, and none of them can see the others. The proxy is
// the one place that sees every call, in every language: applications point
// their SDK's base URL at it and change nothing else. So the forwarding is
// transparent (method, path, query, headers and body pass unchanged, bar
// hop-by-hop headers and Host; a streamed answer passes event by event),
// and governance is added around it, not inside it.
//
// # Lanes
//
// Every call is governed by its lane (package lane): one upstream, one
// credential (a hash of the Authorization, x-api-key, api-key (Azure
// OpenAI), OpenAI-Organization and OpenAI-Project headers as sent upstream,
// never the key) and one model
// (the JSON body's "model"). The proxy computes that key, reads the
// provider's answers into outcomes, Retry-After hints and request budgets
// (x-ratelimit-*, anthropic-ratelimit-requests-*), and hands those to the
// lane, whose queue and controller decide when a call is let out. A call
// that would need a lane beyond Config.MaxLanes is refused with 503
// too_many_lanes and reaches no provider.
//
// Within a lane, calls take the share of their tenant (HeaderTenant,
// DefaultTenant when absent; a name ValidateTenant refuses gets 400 and
// runs nothing): the lane's queue shares its slots fairly among the
// tenants with calls waiting at an urgency (package queue).
//
// # The round trip
//
// A call is buffered once (retries need its body), waits in its lane's
// queue, and is sent when let out; its attempt timeout starts then, not at
// enqueue, and the request for the upstream is built only then too. A
// waiting call holds the client's request, a few hundred bytes of state and
// the 4 KiB stack of fasthttp's goroutine, which the frames on it during the
// wait are kept small enough not to grow (see forward). The answer is
// classified: success; rate-limited (429 and 529, with any retry-after-ms /
// retry-after hint; and a streamed success that the provider ends with an
// overloaded_error event, the call passed on as it is: an event stream
// passed on is one attempt, whose one outcome, how it ended, the
// controller hears when it ends, as for an answer read whole); quota exhausted (a final 429); server error
// (500/502/503/504); timeout; connection error (an attempt whose request
// never reached a connection to the upstream before its deadline too: the
// provider never saw it); or final (other 4xx, passed straight back). What a retry can fix is retried ahead of fresh calls,
// after the provider's hint or an exponential backoff with full jitter,
// until the budget is spent; then the provider's last answer goes back
// with x-should-retry: false, so the official SDKs do not multiply retries
// Governor already made (and its Retry-After, or retry-after-ms, at most
// 60 s, the most Governor ever sends). A 429 that came while the lane's other calls were
// being served does not spend the budget: under a concurrency cap the call
// lost the race for a slot the lane holds, and waits for its turn again
// (for Config.QueueTimeout at most). A timed-out attempt is abandoned, its
// connection closed; HTTP cannot cancel it at the provider, which may serve
// it as well as its retry. A streamed answer (an event stream, or NDJSON)
// is returned as soon as its headers arrive and is never retried after its
// first byte; but a Call of Do reads it whole inside its attempt, and a
// stream the provider ended with an error event, or that stopped before
// its last event (an NDJSON stream: its "done":true or
// {"status":"success"} line), is a failed
// attempt, retried (see Call.Body). Any other
// answer, however framed, is read whole inside its
// attempt (up to Config.MaxResponseBytes), so a cut one is retried, never
// passed on short; but a forwarded call's success that does not fit in
// what Config.MaxBufferedBytes has left is passed on as it arrives, as a
// stream is (a JSON one framed by its connection's close alone is
// followed as it passes, and reaches its client cut if the close cut it).
//
// # Bounds
//
// The request bodies held by calls waiting or in flight are bounded by
// Config.MaxBufferedBytes (503 buffers_full beyond it, before the body is
// read: its Content-Length, or for a chunked body MaxBodyBytes or what is
// left, which then bounds it, is reserved on its head; a body keeps its
// room only while it arrives at the pace that ends it within
// Config.ReadTimeout, give or take 64 KiB: when room is wanted, one further
// behind gives it up and its client gets 408), and so are, apart, the
// successful answers read whole until they are written (one that does not
// fit is passed on as it arrives); the client connections of each
// listener by Config.MaxConnections (503 and closed beyond it). A listener
// that runs out of file descriptors pauses its accepts until some close,
// instead of failing. A request that is not HTTP/1.0 or 1.1 gets 400, one
// whose method is not GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS
// (TRACE, CONNECT, PRI) 405, and OPTIONS * is answered by Governor; one
// framed by both Content-Length and
// Transfer-Encoding is served, and its connection closed after the answer.
// A head with a line that ends in a bare LF gets 400 at once (see headScan),
// pipelined behind other requests or not;
// the fields of a chunked body's trailer are dropped.
// Calls go upstream in HTTP/1.1 whatever version the client spoke; a
// stream to a client in HTTP/1.0, which has no chunked coding, is ended by
// the close of its connection.
//
// A call answered 429 or 529 waits for its hint, and a Retry-After also
// pauses the lane, until the hint or until a call of the lane succeeds,
// whichever is first: under a request budget the lane waits
// (and the lane's pacer spaces dispatches so that the budget is met by
// waiting rather than by 429s); under a concurrency cap a completed call
// frees a slot at once. A 429 that reports its request budget empty, of a
// call sent before the lane knew that budget, is left to the pacer: the
// lane's concurrency limit does not come down for it
// (lane.Lane.ObserveEmptyBudget).
//
// # What it tells
//
// Metrics go on the Config.Metrics set: per route, answers by status class,
// calls by how they ended and each attempt's latency; per lane (package
// lane), what the lane counts, and the tokens each successful answer
// reports in its usage (package usage: a JSON answer once read, gzip or
// deflate decoded; an event stream as it passes, without holding it: a
// call that asks for a stream goes upstream with Accept-Encoding:
// identity, so that its events can be read).
// Config.AccessLog, when set, gets one line per call.
//
// # fasthttp
//
// fasthttp was chosen for its allocation-free request handling; its
// contracts shape the code (see STYLE.md): nothing from a RequestCtx
// outlives its handler; a client that disconnects is invisible to fasthttp,
// so one goroutine peeks at the socket of every call's client (MSG_PEEK)
// each quarter second to notice: a call that waits leaves the queue, and an
// attempt in flight is cut (fasthttp's client cannot be cancelled: the
// attempt's upstream connection is found through the request body's writer
// and its read deadline moved to now; the cut is counted as outcome
// client_gone and not fed to the controller; a Call of Do is cut the same
// way when its context ends);
// upstream bodies are streamed with our own bounds and idle timeouts, and
// only the goroutine that reads a body stream closes it.
//
// # Governor's own API
//
// Paths under /governor/ are Governor's, not forwarded: GET /governor/lanes
// here, the batch API through HandleAPI and Do, the live page's static files
// through HandlePublic. Config.APIToken guards all but those public files
// with a header of their own, X-Governor-Token, so that provider
// credentials in Authorization pass through untouched.
package proxy
