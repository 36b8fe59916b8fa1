// Package proxy is Governor's front: a fasthttp server that forwards an
// application's LLM calls to their provider under governance, and the
// governed round trip that the batch API shares.
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
// Forwarding is transparent: method, path, query, headers and body pass
// unchanged, bar hop-by-hop headers and Host, and calls go upstream in
// HTTP/1.1 whatever version the client spoke. Paths under /governor/ are
// Governor's own, not forwarded: GET /governor/lanes, and what HandleAPI
// and HandlePublic register. Config.APIToken guards all but the public
// ones with a header of their own, X-Governor-Token, so that provider
// credentials in Authorization pass through untouched.
//
// Every call is governed by its lane (package lane): one upstream, one
// credential (a hash of the headers that carry it, never the key) and one
// model (the JSON body's "model"); within a lane, calls take the share of
// their tenant (HeaderTenant). A call waits in its lane's queue until the
// lane lets it out, and its attempt timeout starts then. Each answer is
// classified into an outcome the lane's controller learns from, and its
// Retry-After and rate-limit headers are handed to the lane. What a retry
// can fix is retried ahead of fresh calls, after the provider's hint or a
// jittered exponential backoff, until the call's retry budget is spent;
// then the provider's last answer goes back with x-should-retry: false.
// Every answer carries the call's execution details (Details: the
// X-Governor-Status, X-Governor-Attempts and X-Governor-Queue-Ms headers).
//
// A streamed answer (an event stream, or NDJSON) is passed on as it
// arrives, event by event, and never retried after its first byte; a Call
// of Do reads it whole inside its attempt, so that a stream cut or ended
// by an error event is retried there. Any other answer is read whole
// inside its attempt, up to Config.MaxResponseBytes, so that a cut one is
// retried, never passed on short; a success that does not fit in what
// Config.MaxBufferedBytes leaves for answers is passed on as it arrives
// instead, and a cut aborts it. The lane hears an answer passed on as it
// arrives once it has ended: how it ended is its outcome.
//
// What the proxy holds is bounded: the request bodies of calls waiting or
// in flight by Config.MaxBufferedBytes (503 buffers_full, before the body
// is read), client connections by Config.MaxConnections (503, then
// closed), lanes by Config.MaxLanes (503 too_many_lanes), each lane's
// waiting calls by Config.QueueCapacity. A listener that runs out of file
// descriptors pauses its accepts instead of failing. A request Governor
// refuses gets an error in the shape of the provider its path routes to
// (OpenAI's or Anthropic's) and reaches no provider.
//
// The rules in detail, and the reasoning and measurements behind them,
// are in DESIGN.md beside this file.
package proxy
