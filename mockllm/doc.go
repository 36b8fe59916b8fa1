// Package mockllm simulates an LLM provider: OpenAI's chat completions,
// embeddings and models endpoints and Anthropic's messages endpoint, JSON and
// streamed, behind the limits and failures that Governor exists to absorb.
//
// Governor's worth shows only against a provider that pushes back: one that
// caps concurrency, refills a token bucket, changes its capacity mid-run,
// answers 429 and 529 with retry hints, fails with 5xx, resets connections
// and hangs. Real providers do all of that, but not on demand, not
// reproducibly and not for free. This package does it in-process for unit
// tests (New and ServeHTTP, or Start for a real listener), for `governor
// -demo`, for end-to-end tests with the official openai and
// @anthropic-ai/sdk SDKs, and for load benchmarks (cmd/mockllm).
//
// # Answers
//
// An answer depends only on the request body: ids are hashes of the body,
// `created` is fixed, and the text is "Simulated answer to: " followed by the
// first 40 characters of the last user message. The same body therefore gives
// the same bytes whether sent directly or through a proxy. Streams split the
// same text into Config.StreamChunks chunks and flush each one.
//
// # Overload in a stream
//
// A provider that becomes overloaded after it has begun a stream with a 200
// can no longer say so with a status; it ends the stream with an error
// event instead. Anthropic sends
//
//	event: error
//	data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
//
// and no message_stop. OpenAI sends an unnamed event holding only an error
// object, then [DONE]:
//
//	data: {"error":{"message":"...","type":"server_error","param":null,"code":null}}
//
//	data: [DONE]
//
// The overload-mid-stream fault and Faults.OverloadedMidStream end a stream
// that way, in the shape of its route, after half of its events.
//
// # Limits
//
// Config.MaxConcurrency caps the requests being served at once; a request
// beyond the cap gets 429 with `retry-after: 1` at once. A request holds
// its place until its answer is generated (a stream: until its last event)
// and gives it back before the answer's last bytes are written, so a client
// that has read a whole answer always finds the place free again, as a
// provider frees a slot when generation ends, not when the bytes arrive. Config.Rate and Config.Burst define a token
// bucket; a request that finds no token gets 429 with `retry-after-ms` and
// `retry-after`. While a bucket is in force every answer of the API carries
// `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests` and
// `x-ratelimit-reset-requests`, and on /v1/messages also
// `anthropic-ratelimit-requests-limit`, `-remaining` and `-reset`.
// Config.Schedule changes these limits at given offsets. Config.Faults adds
// random 500s, 529s, resets, hangs and streams ended by an overload.
//
// Token budgets limit what calls cost, as providers' per-minute limits do:
// Config.TokensPerMinute (OpenAI's TPM: prompt plus max_tokens) with
// `x-ratelimit-{limit,remaining,reset}-tokens`, and
// Config.InputTokensPerMinute and OutputTokensPerMinute (Anthropic's ITPM
// and OTPM, unused output tokens given back) with
// `anthropic-ratelimit-{input-tokens,output-tokens,tokens}-{limit,remaining,reset}`,
// the reset an RFC 3339 time. Config.TokenWindow makes them budgets per
// day (24h, as OpenAI's TPD) or per second instead of per minute: they
// refill whole in that window, and the reset headers say so. A call that
// does not fit gets 429 with
// `retry-after-ms` and `retry-after`, and OpenAI's message stating `Limit`,
// `Used` and `Requested`; one that costs more than a whole budget gets 429
// without a hint ("Request too large").
//
// # Time
//
// A call's first byte comes after Config.Latency, and its output tokens
// take Config.OutputTokensPerSecond more (Config.FillMaxTokens makes an
// answer as long as its max_tokens, so that time varies with it); both are
// multiplied by one lognormal factor of sigma Config.LatencySpread, whose
// tail is that of real providers at 0.5 to 1. Config.Knee simulates a
// server that queues instead of refusing (vLLM and the like): never a 429
// of its own, but beyond Knee calls in flight each one takes (in flight /
// Knee)² as long.
//
// # Request headers
//
// A test can steer one request with these headers:
//
//   - X-Mock-Fault: a comma-separated list of faults applied to successive
//     attempts of the same X-Request-Id (attempt n gets entry n; attempts
//     past the list are normal). Without X-Request-Id the first entry
//     applies to every request. Values: ok, 400, 401, 429, 429-quota (OpenAI
//     insufficient_quota), 500, 502, 503, 504, 529, reset (TCP RST, no
//     answer), hang (no answer until the client leaves or the server
//     closes), reset-mid-stream and hang-mid-stream (half of the answer,
//     then a reset or a stall), ping-mid-stream (half of a stream, then
//     keep-alive events every ChunkDelay, 100 ms when unset, and never its
//     end: Anthropic's ping event on /v1/messages, an SSE comment line
//     ": keep-alive" elsewhere; a JSON answer stalls half way), and overload-mid-stream (half of a stream,
//     then the error event the provider ends a begun stream with when it
//     is overloaded; a JSON answer gets the overload status, 529 on
//     /v1/messages, 503 elsewhere). 400, 401, 429, 503 and 529 are
//     answered at once; 500, 502, 504 and reset after the latency wait. A forced fault
//     replaces random faults; it applies only to requests the limits admit.
//     An unknown value gets 400.
//   - X-Request-Id: the id that ties attempts together; counted in
//     Stats.ByRequestID.
//   - X-Mock-Latency: this request's latency, such as 250ms, instead of
//     Config.Latency and its spread.
//   - X-Mock-Retry-After, X-Mock-Retry-After-Ms: the verbatim value of the
//     Retry-After and Retry-After-Ms headers of a forced 429, 503 or 529
//     (forced faults carry no retry hint otherwise).
//
// The SDKs' x-stainless-retry-count header is tracked in Stats.
//
// # Endpoints
//
//	POST /v1/chat/completions   OpenAI chat, "stream": true for SSE
//	POST /v1/embeddings         float or base64 vectors, "dimensions" (default 8)
//	GET  /v1/models, /v1/models/{id}
//	POST /v1/messages           Anthropic messages, "stream": true for SSE
//	GET  /stats                 Stats as JSON
//	POST /stats/reset, DELETE /stats   Reset
//
// Anything else gets 404 in OpenAI's error shape (Anthropic's under
// /v1/messages).
package mockllm
