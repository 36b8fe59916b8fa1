// The official OpenAI and Anthropic Node SDKs, pointed at a real Governor in
// front of a real mockllm: every call shape passes through, streams arrive
// chunk by chunk and end properly, and a call Governor gives up on is not
// retried again by the SDK.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { header, startGovernor, startMock, uniqueId } from './harness.mjs';

const CHUNKS = 8;
const CHUNK_DELAY_MS = 25;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let mock;
let gov;
let openai;
let anthropic;

before(async () => {
  mock = await startMock(['-latency', '20ms', '-chunks', String(CHUNKS), '-chunk-delay', `${CHUNK_DELAY_MS}ms`]);
  gov = await startGovernor(mock.url);
  // SDK retries left at their defaults (maxRetries 2) on purpose.
  openai = new OpenAI({ apiKey: 'sk-e2e-openai', baseURL: gov.openaiBaseURL });
  anthropic = new Anthropic({ apiKey: 'sk-ant-e2e', baseURL: gov.anthropicBaseURL });
  assert.equal(openai.maxRetries, 2);
  assert.equal(anthropic.maxRetries, 2);
}, { timeout: 120_000 });

after(async () => {
  await Promise.allSettled([gov?.stop(), mock?.stop()]);
});

function assertGoverned(headers, status = 'COMPLETED') {
  assert.equal(header(headers, 'x-governor-status'), status);
  assert.ok(Number(header(headers, 'x-governor-attempts')) >= 1, 'X-Governor-Attempts present');
  assert.match(String(header(headers, 'x-governor-queue-ms')), /^\d+$/, 'X-Governor-Queue-Ms present');
}

describe('OpenAI SDK through Governor', () => {
  test('chat completion', async () => {
    const { data, response } = await openai.chat.completions
      .create({ model: 'gpt-e2e-chat', messages: [{ role: 'user', content: 'Hello' }] })
      .withResponse();
    assert.equal(response.status, 200);
    assertGoverned(response.headers);
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.model, 'gpt-e2e-chat');
    assert.equal(data.choices.length, 1);
    assert.equal(data.choices[0].message.role, 'assistant');
    assert.equal(data.choices[0].message.content, 'Simulated answer to: Hello');
    assert.equal(data.choices[0].finish_reason, 'stop');
    assert.ok(data.usage.total_tokens > 0);
  });

  test('streamed chat completion: every chunk, chunk by chunk, then the end', async () => {
    const before = await mock.stats();
    const { data: stream, response } = await openai.chat.completions
      .create({ model: 'gpt-e2e-stream', stream: true, messages: [{ role: 'user', content: 'Hello' }] })
      .withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type'), /^text\/event-stream/);
    assertGoverned(response.headers);

    const chunks = [];
    const arrivals = [];
    // for await ends only when the SDK has consumed `data: [DONE]` (or the
    // body ended); a stream that hangs fails the test by its timeout.
    for await (const chunk of stream) {
      arrivals.push(performance.now());
      chunks.push(chunk);
    }
    assert.equal(chunks.length, CHUNKS + 2, 'role chunk + content chunks + finish chunk');
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      assert.equal(c.id, chunks[0].id);
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, 'Simulated answer to: Hello');
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    assert.equal(chunks.filter((c) => c.choices[0].finish_reason === 'stop').length, 1);
    // Governor passes the stream through as it comes instead of buffering it
    // whole: the chunks arrive spread over the provider's pacing.
    const spread = arrivals.at(-1) - arrivals[0];
    assert.ok(spread >= CHUNK_DELAY_MS * 4, `chunks arrived over ${spread.toFixed(0)}ms, want streaming`);

    const afterStats = await mock.stats();
    assert.equal(afterStats.streams_completed - before.streams_completed, 1);
    assert.equal(afterStats.streams_aborted - before.streams_aborted, 0);
  });

  test('streamed chat completion, raw: the last event is data: [DONE]', async () => {
    const res = await fetch(`${gov.openaiBaseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-e2e-openai' },
      body: JSON.stringify({ model: 'gpt-e2e-stream', stream: true, messages: [{ role: 'user', content: 'Hello' }] }),
    });
    assert.equal(res.status, 200);
    assertGoverned(res.headers);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const body = await res.text();
    const events = body
      .split(/\r?\n\r?\n/)
      .map((e) => e.trim())
      .filter(Boolean);
    assert.equal(events.length, CHUNKS + 3, 'chunks + [DONE]');
    assert.equal(events.at(-1), 'data: [DONE]');
    assert.equal(events.filter((e) => e === 'data: [DONE]').length, 1);
    for (const e of events.slice(0, -1)) {
      assert.ok(e.startsWith('data: {'), `event ${JSON.stringify(e)}`);
      JSON.parse(e.slice('data: '.length));
    }
    assert.ok(body.endsWith('\n\n'), 'stream ends with a complete event');
  });

  test('embeddings', async () => {
    // The SDK asks for base64 and decodes it by default.
    const { data, response } = await openai.embeddings
      .create({ model: 'text-embedding-e2e', input: ['first', 'second'] })
      .withResponse();
    assertGoverned(response.headers);
    assert.equal(data.object, 'list');
    assert.equal(data.data.length, 2);
    data.data.forEach((d, i) => {
      assert.equal(d.index, i);
      assert.ok(Array.isArray(d.embedding) && d.embedding.length > 0);
      assert.ok(d.embedding.every((x) => typeof x === 'number' && Number.isFinite(x)));
    });
    // Float vectors as asked, with dimensions.
    const floats = await openai.embeddings.create({
      model: 'text-embedding-e2e',
      input: 'third',
      encoding_format: 'float',
      dimensions: 16,
    });
    assert.equal(floats.data.length, 1);
    assert.equal(floats.data[0].embedding.length, 16);
  });

  test('a streamed call is retried before its first byte', async () => {
    const id = uniqueId('openai-stream-retry');
    const { data: stream, response } = await openai.chat.completions
      .create(
        { model: 'gpt-e2e-stream-retry', stream: true, messages: [{ role: 'user', content: 'Hello' }] },
        { headers: { 'X-Mock-Fault': '429,500', 'X-Request-Id': id, 'X-Mock-Retry-After-Ms': '50' } },
      )
      .withResponse();
    assertGoverned(response.headers, 'COMPLETED_WITH_RETRIES');
    assert.equal(response.headers.get('x-governor-attempts'), '3');
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Simulated answer to: Hello');
    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], 3);
  });

  test('a call the SDK aborts while it waits in the queue never reaches the provider', async () => {
    const model = 'gpt-e2e-abort';
    // A 429 with Retry-After: 2 pauses the lane for 2 s.
    const first = openai.chat.completions
      .create(
        { model, messages: [{ role: 'user', content: 'first' }] },
        { headers: { 'X-Mock-Fault': '429', 'X-Request-Id': uniqueId('openai-pause'), 'X-Mock-Retry-After': '2' } },
      )
      .withResponse();
    await sleep(200);
    const id = uniqueId('openai-aborted');
    const ac = new AbortController();
    const queued = openai.chat.completions.create(
      { model, messages: [{ role: 'user', content: 'second' }] },
      { signal: ac.signal, headers: { 'X-Request-Id': id } },
    );
    await sleep(300);
    ac.abort();
    await assert.rejects(queued, OpenAI.APIUserAbortError);
    const { response } = await first;
    assertGoverned(response.headers, 'COMPLETED_WITH_RETRIES');
    await sleep(200);
    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], undefined, 'the aborted call was sent upstream');
    const lanes = await (await fetch(`${gov.url}/governor/lanes`)).json();
    const lane = lanes.lanes.find((l) => l.model === model);
    assert.equal(lane.queued, 0);
    assert.equal(lane.in_flight, 0);
  });

  test('a call Governor gives up on is not retried by the SDK', async () => {
    await mock.reset();
    const id = uniqueId('openai-giveup');
    const t0 = performance.now();
    let err;
    try {
      await openai.chat.completions.create(
        { model: 'gpt-e2e-giveup', messages: [{ role: 'user', content: 'fail' }] },
        {
          headers: {
            // Every attempt (Governor's and any the SDK would add) gets a 500.
            'X-Mock-Fault': '500,500,500,500,500,500',
            'X-Request-Id': id,
            'X-Governor-Max-Retries': '1',
          },
        },
      );
    } catch (e) {
      err = e;
    }
    const ms = performance.now() - t0;
    assert.ok(err instanceof OpenAI.APIError, `want an APIError, got ${err}`);
    assert.ok(err instanceof OpenAI.InternalServerError);
    assert.equal(err.status, 500);
    assert.equal(header(err.headers, 'x-should-retry'), 'false');
    assert.equal(header(err.headers, 'x-governor-status'), 'FAILED');
    assert.equal(header(err.headers, 'x-governor-attempts'), '2');

    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], 2, 'Governor made 2 attempts and the SDK none more');
    assert.equal(stats.received, 2);
    assert.equal(stats.max_retry_count, 0, 'the SDK never sent a retry');
    assert.equal(stats.retry_count_nonzero, 0);
    assert.ok(ms < 20_000, `gave up after ${ms.toFixed(0)}ms`);
  });
  test('an overload in the middle of a stream reaches the SDK as an error', async () => {
    const id = uniqueId('openai-overload-mid-stream');
    const { data: stream, response } = await openai.chat.completions
      .create(
        { model: 'gpt-e2e-overload', stream: true, messages: [{ role: 'user', content: 'Hello' }] },
        { headers: { 'X-Mock-Fault': 'overload-mid-stream', 'X-Request-Id': id } },
      )
      .withResponse();
    assert.equal(response.status, 200);
    let chunks = 0;
    let err;
    try {
      for await (const chunk of stream) chunks += chunk.object === 'chat.completion.chunk' ? 1 : 0;
    } catch (e) {
      err = e;
    }
    assert.ok(chunks >= 1, 'the first half of the answer arrived');
    assert.ok(err instanceof OpenAI.APIError, `want an APIError, got ${err}`);
    assert.match(err.message, /overloaded/);
    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], 1, 'a stream is not retried after its first byte');
  });
});

describe('Anthropic SDK through Governor', () => {
  test('message', async () => {
    const { data, response } = await anthropic.messages
      .create({ model: 'claude-e2e', max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] })
      .withResponse();
    assert.equal(response.status, 200);
    assertGoverned(response.headers);
    assert.equal(data.type, 'message');
    assert.equal(data.role, 'assistant');
    assert.equal(data.model, 'claude-e2e');
    assert.equal(data.content.length, 1);
    assert.equal(data.content[0].type, 'text');
    assert.equal(data.content[0].text, 'Simulated answer to: Hello');
    assert.ok(data.stop_reason);
    assert.ok(data.usage.output_tokens > 0);

    const stats = await mock.stats();
    // The key passes through: SDKs before 1.0 send it as x-api-key, 1.x as
    // Authorization: Bearer.
    const key = stats.last_headers['x-api-key'] ?? stats.last_headers.authorization?.replace(/^Bearer /, '');
    assert.equal(key, 'sk-ant-e2e', 'the key passes through');
    assert.match(stats.last_headers['anthropic-version'] ?? '', /^\d{4}-\d{2}-\d{2}$/);
  });

  test('streamed message (messages.stream): events in order', async () => {
    const before = await mock.stats();
    const stream = anthropic.messages.stream({
      model: 'claude-e2e-stream',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'Hello' }],
    });
    const types = [];
    let text = '';
    const arrivals = [];
    for await (const event of stream) {
      arrivals.push(performance.now());
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    }
    const final = await stream.finalMessage();
    const { response } = await stream.withResponse();
    assertGoverned(response.headers);

    const deltas = types.filter((t) => t === 'content_block_delta').length;
    assert.ok(deltas >= 1, 'at least one content_block_delta');
    const expected = [
      'message_start',
      'content_block_start',
      ...Array(deltas).fill('content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ];
    assert.deepEqual(types.filter((t) => t !== 'ping'), expected);
    assert.equal(text, 'Simulated answer to: Hello');
    assert.equal(final.content[0].text, text);
    assert.ok(final.stop_reason);
    const spread = arrivals.at(-1) - arrivals[0];
    assert.ok(spread >= CHUNK_DELAY_MS * 4, `events arrived over ${spread.toFixed(0)}ms, want streaming`);

    const afterStats = await mock.stats();
    assert.equal(afterStats.streams_completed - before.streams_completed, 1);
  });

  test('streamed message (messages.create with stream: true)', async () => {
    const stream = await anthropic.messages.create({
      model: 'claude-e2e-stream',
      max_tokens: 64,
      stream: true,
      messages: [{ role: 'user', content: 'Hello' }],
    });
    const types = [];
    for await (const event of stream) types.push(event.type);
    const t = types.filter((x) => x !== 'ping');
    assert.equal(t[0], 'message_start');
    assert.equal(t[1], 'content_block_start');
    assert.deepEqual(t.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.ok(t.slice(2, -3).length >= 1);
    assert.ok(t.slice(2, -3).every((x) => x === 'content_block_delta'));
  });

  test('a call Governor gives up on (529) is not retried by the SDK', async () => {
    await mock.reset();
    const id = uniqueId('anthropic-giveup');
    let err;
    try {
      await anthropic.messages.create(
        { model: 'claude-e2e-giveup', max_tokens: 64, messages: [{ role: 'user', content: 'fail' }] },
        {
          headers: {
            'X-Mock-Fault': '529,529,529,529,529,529',
            'X-Request-Id': id,
            'X-Governor-Max-Retries': '1',
          },
        },
      );
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof Anthropic.APIError, `want an APIError, got ${err}`);
    assert.equal(err.status, 529);
    assert.equal(err.error?.error?.type, 'overloaded_error');
    assert.equal(header(err.headers, 'x-should-retry'), 'false');
    assert.equal(header(err.headers, 'x-governor-status'), 'FAILED');
    assert.equal(header(err.headers, 'x-governor-attempts'), '2');

    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], 2, 'Governor made 2 attempts and the SDK none more');
    assert.equal(stats.received, 2);
    assert.equal(stats.max_retry_count, 0, 'the SDK never sent a retry');
    assert.equal(stats.retry_count_nonzero, 0);
  });
  test('an overloaded_error in the middle of a stream reaches the SDK as an error', async () => {
    const id = uniqueId('anthropic-overload-mid-stream');
    const stream = await anthropic.messages.create(
      { model: 'claude-e2e-overload', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Hello' }] },
      { headers: { 'X-Mock-Fault': 'overload-mid-stream', 'X-Request-Id': id } },
    );
    const types = [];
    let err;
    try {
      for await (const event of stream) types.push(event.type);
    } catch (e) {
      err = e;
    }
    assert.equal(types[0], 'message_start', 'the first half of the answer arrived');
    assert.ok(!types.includes('message_stop'));
    assert.ok(err instanceof Anthropic.APIError, `want an APIError, got ${err}`);
    assert.match(JSON.stringify(err.error), /overloaded_error/);
    const stats = await mock.stats();
    assert.equal(stats.by_request_id[id], 1, 'a stream is not retried after its first byte');
  });
});

describe("Governor's own refusals", () => {
  test('a full queue answers 503 with Retry-After, and the SDK comes back after it', async () => {
    // A lane of one call at a time with room for one waiting call.
    const small = await startGovernor(mock.url, { GOVERNOR_MAX_CONCURRENCY: '1', GOVERNOR_QUEUE_CAPACITY: '1' });
    try {
      const model = 'gpt-e2e-full';
      const sdk = new OpenAI({ apiKey: 'sk-e2e-openai', baseURL: small.openaiBaseURL });
      // hold sends a call of the same lane (same key, same model) that the
      // provider never answers, until aborted.
      const hold = () => {
        const ac = new AbortController();
        fetch(`${small.url}/v1/chat/completions`, {
          method: 'POST',
          signal: ac.signal,
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk-e2e-openai', 'x-mock-fault': 'hang' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hold' }] }),
        }).catch(() => {});
        return ac;
      };
      const until = async (what, pred) => {
        for (let i = 0; i < 400; i++) {
          if (await pred()) return;
          await sleep(25);
        }
        throw new Error(`never: ${what}`);
      };
      const lane = async () => (await (await fetch(`${small.url}/governor/lanes`)).json()).lanes.find((l) => l.model === model);
      const refused = async () => {
        const text = await (await fetch(`${small.admin}/metrics`)).text();
        return /^governor_errors_total\{code="queue_full"\} [1-9]/m.test(text);
      };

      const inFlight = hold();
      await until('one call in flight', async () => (await lane())?.in_flight === 1);
      const waiting = hold();
      await until('one call waiting', async () => (await lane())?.queued === 1);
      await mock.reset();

      const t0 = performance.now();
      const call = sdk.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hello' }] }).withResponse();
      await until('the SDK refused with queue_full', refused);
      // The lane frees up; the SDK's retry, a second later, gets in.
      waiting.abort();
      inFlight.abort();
      const { data, response } = await call;
      assert.equal(response.status, 200);
      assertGoverned(response.headers);
      assert.equal(data.choices[0].message.content, 'Simulated answer to: Hello');
      assert.ok(performance.now() - t0 >= 1000, 'the SDK waited for the Retry-After (1 s)');
      const stats = await mock.stats();
      assert.ok(stats.max_retry_count >= 1, 'the answer came to a retry of the SDK');
    } finally {
      await small.stop();
    }
  });
});
