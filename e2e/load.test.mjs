// 100 concurrent OpenAI SDK calls against a provider that serves 4 at a
// time: Governor queues and paces them, absorbs the provider's 429s, and
// every SDK call succeeds without a retry of its own.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startGovernor, startMock } from './harness.mjs';

const CALLS = 100;
const CAP = 4;

let mock;
let gov;

before(async () => {
  mock = await startMock(['-max-concurrency', String(CAP), '-latency', '100ms']);
  gov = await startGovernor(mock.url);
}, { timeout: 120_000 });

after(async () => {
  await Promise.allSettled([gov?.stop(), mock?.stop()]);
});

test(`${CALLS} concurrent SDK calls against a provider capped at ${CAP}`, { timeout: 90_000 }, async (t) => {
  // SDK defaults (maxRetries 2): any SDK retry would show in the mock's
  // x-stainless-retry-count statistics.
  const openai = new OpenAI({ apiKey: 'sk-e2e-load', baseURL: gov.openaiBaseURL });
  assert.equal(openai.maxRetries, 2);
  await mock.reset();

  const t0 = performance.now();
  const results = await Promise.allSettled(
    Array.from({ length: CALLS }, (_, i) =>
      openai.chat.completions
        .create({ model: 'gpt-e2e-load', messages: [{ role: 'user', content: `call ${i}` }] })
        .withResponse(),
    ),
  );
  const ms = performance.now() - t0;

  const failed = results.filter((r) => r.status === 'rejected');
  assert.equal(failed.length, 0, `SDK errors: ${failed.slice(0, 3).map((r) => r.reason).join('; ')}`);
  const attempts = [];
  results.forEach(({ value: { data, response } }, i) => {
    assert.equal(data.choices[0].message.content, `Simulated answer to: call ${i}`);
    const status = response.headers.get('x-governor-status');
    const n = Number(response.headers.get('x-governor-attempts'));
    assert.ok(n >= 1, `call ${i}: X-Governor-Attempts ${n}`);
    assert.equal(status, n > 1 ? 'COMPLETED_WITH_RETRIES' : 'COMPLETED', `call ${i}`);
    attempts.push(n);
  });

  const stats = await mock.stats();
  const retried = attempts.filter((n) => n > 1).length;
  const totalAttempts = attempts.reduce((a, b) => a + b, 0);
  t.diagnostic(
    `${CALLS} calls in ${ms.toFixed(0)}ms; mock: received ${stats.received}, 429s ${stats.rate_limited}, ` +
      `max_in_flight ${stats.max_in_flight}; Governor: ${retried} calls retried, ${totalAttempts} attempts`,
  );

  assert.equal(stats.retry_count_nonzero, 0, 'the SDKs made no retry of their own');
  assert.equal(stats.max_retry_count, 0, 'the SDKs made no retry of their own');
  assert.ok(stats.max_in_flight <= CAP, `max_in_flight ${stats.max_in_flight}`);
  assert.equal(stats.answered['200'], CALLS);
  // Every upstream attempt is one Governor reported; the only failures the
  // provider gave were the 429s Governor absorbed (there may be none if the
  // controller stayed under the cap).
  assert.equal(stats.received, totalAttempts, 'upstream requests = sum of X-Governor-Attempts');
  assert.equal(stats.rate_limited, totalAttempts - CALLS, '429s = retries');
});
