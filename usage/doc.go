// Package usage reads the token counts a provider reports in its answers.
//
// OpenAI-shaped answers (Chat Completions, Completions, and the servers that
// copy them: vLLM, Ollama, LiteLLM) carry
// "usage":{"prompt_tokens":…,"completion_tokens":…}; a stream carries it in
// its last chunk when the request asked for it with
// "stream_options":{"include_usage":true}. OpenAI's Responses API carries
// "input_tokens" / "output_tokens", in the answer and in its
// response.completed event. Anthropic's Messages API carries
// "usage":{"input_tokens":…,"output_tokens":…}, and a stream reports it twice:
// in message_start (the input, and a first output count) and in
// message_delta (the output so far, cumulative).
//
// Parse reads a whole answer body. A Stream reads a streamed body as it
// passes, chunk by chunk, with Write: it keeps a few bytes, and a usage
// object that a chunk cut short, never the stream. Both look only at the
// "usage" objects of the text and nothing else, allocate nothing, and
// tolerate anything: text that is not JSON, not SSE, cut anywhere, or
// carries usage fields of the wrong type yields whatever valid counts it
// holds, possibly none.
//
// When one answer reports usage more than once, each report sets the fields
// it carries and leaves the others: Anthropic's message_delta replaces the
// output count of message_start and keeps its input count.
//
// Prompt counts every input token the provider processed: Anthropic's
// input_tokens plus its cache_creation_input_tokens and
// cache_read_input_tokens (which Anthropic reports apart), OpenAI's
// prompt_tokens or input_tokens (which include cached tokens).
//
// Compressed bodies (Content-Encoding gzip, br, …) must be decoded first:
// their bytes hold no readable usage.
package usage
