// The live page, GET /governor/ui, in a real headless Chromium (Debian's
// chromium package, driven by playwright-core): behind an API token, after
// traffic through a real Governor, it shows the lanes, an async job's
// progress moves, and its Cancel button cancels the job. The screenshot it
// takes is README's (set GOVERNOR_UI_SCREENSHOT=docs/ui.png to refresh it).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { REPO_ROOT, startGovernor, startMock } from './harness.mjs';

const TOKEN = 'ui-e2e-token';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const MODEL = 'gpt-4o-mini';
const CLAUDE = 'claude-sonnet-4';

// findChromium returns the browser to drive: CHROMIUM_BIN, or Debian's.
function findChromium() {
  const candidates = [process.env.CHROMIUM_BIN, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  return candidates.find((p) => p && fs.existsSync(p));
}

const browserPath = findChromium();
// In CI a missing browser is a failure, not a skip.
const skip = !browserPath && !process.env.GOVERNOR_CI && 'no chromium (apt-get install chromium, or set CHROMIUM_BIN)';

let mock;
let anthropicMock;
let gov;
let browser;

before(async () => {
  if (skip) return;
  // Providers that serve 6 calls at once and answer 429 beyond: a lane's
  // limit settles around 6 and a batch of thousands runs for a while.
  [mock, anthropicMock] = await Promise.all([0, 1].map(() => startMock(['-max-concurrency', '6', '-latency', '40ms'])));
  gov = await startGovernor(mock.url, { GOVERNOR_API_TOKEN: TOKEN, GOVERNOR_ROUTES: `anthropic=${anthropicMock.url}` });
  assert.ok(browserPath, 'chromium not found: apt-get install chromium, or set CHROMIUM_BIN');
  browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
}, { timeout: 60_000 });

after(async () => {
  await browser?.close();
  await Promise.allSettled([gov?.stop(), mock?.stop(), anthropicMock?.stop()]);
});

// api calls Governor's own API with the token.
async function api(p, init = {}) {
  const r = await fetch(`${gov.url}/governor/${p}`, {
    ...init,
    headers: { 'X-Governor-Token': TOKEN, 'Content-Type': 'application/json', ...init.headers },
  });
  const body = await r.json();
  assert.ok(r.ok, `${init.method || 'GET'} /governor/${p}: ${r.status} ${JSON.stringify(body)}`);
  return body;
}

function startJob(items, model) {
  const requests = Array.from({ length: items }, (_, i) => ({
    custom_id: `r${i}`,
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: `item ${i}` }] },
  }));
  return api('batches', { method: 'POST', body: JSON.stringify({ requests }), headers: { Authorization: 'Bearer sk-ui' } });
}

test('the live page shows lanes and jobs, and cancels a job', { skip, timeout: 60_000 }, async (t) => {
  // The page's files need no token and hold nothing; its data does.
  const shell = await fetch(`${gov.url}/governor/ui`);
  assert.equal(shell.status, 200);
  assert.ok(!(await shell.text()).includes(TOKEN));
  assert.equal((await fetch(`${gov.url}/governor/lanes`)).status, 401);

  const page = await browser.newPage({ viewport: { width: 1360, height: 820 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('dialog', (d) => d.accept());

  // The page asks for the token, says so when it is refused, and once it
  // is accepted keeps it in the tab and polls with it.
  await page.goto(`${gov.url}/governor/ui`);
  await page.locator('#token-form').waitFor({ state: 'visible' });
  assert.equal(await page.locator('#token-error').isVisible(), false);
  await page.fill('#token', 'not-the-token');
  await page.click('#token-form button[type=submit]');
  await page.locator('#token-error').waitFor({ state: 'visible', timeout: 10_000 });
  await page.fill('#token', TOKEN);
  await page.click('#token-form button[type=submit]');
  await page.locator('#status[data-state="live"]').waitFor({ timeout: 10_000 });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('governor.token')), TOKEN);
  // The browser logs the 401s that made the page ask; nothing else may fail.
  assert.ok(problems.every((p) => /status of 401/.test(p)), problems.join('\n'));
  problems.length = 0;
  assert.equal(await page.locator('#lanes-empty').isVisible(), true, 'no lane before the first call');

  // Traffic: interactive calls on an Anthropic lane, a small job that
  // finishes, and a large one that runs until it is cancelled.
  await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      fetch(`${gov.anthropicBaseURL}/v1/messages`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'x-api-key': 'sk-ant-ui', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model: CLAUDE, max_tokens: 16, messages: [{ role: 'user', content: `hi ${i}` }] }),
      }).then((r) => r.arrayBuffer()),
    ),
  );
  // A small job that has finished before the others start.
  const small = await startJob(60, MODEL);
  let st = small;
  while (st.status === 'running') {
    await sleep(100);
    st = await api(`batches/${small.id}`);
  }
  const big = await startJob(5000, MODEL);
  // A sync batch on the Anthropic lane: its client waits for the answer,
  // the page shows its progress meanwhile.
  const syncClient = new AbortController();
  const syncBatch = fetch(`${gov.url}/governor/batch`, {
    method: 'POST',
    signal: syncClient.signal,
    headers: { 'X-Governor-Token': TOKEN, 'Content-Type': 'application/json', 'x-api-key': 'sk-ant-ui', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({
      requests: Array.from({ length: 3000 }, (_, i) => ({
        url: '/anthropic/v1/messages',
        body: { model: CLAUDE, max_tokens: 16, messages: [{ role: 'user', content: `sync ${i}` }] },
      })),
    }),
  }).catch((e) => e);

  const lane = page.locator('tr[data-lane]', { hasText: MODEL });
  await lane.waitFor({ timeout: 10_000 });
  assert.match(await lane.locator('.lane-meta').textContent(), /^default · key /);
  await page.locator('tr[data-lane]', { hasText: CLAUDE }).waitFor({ timeout: 10_000 });
  const limit = Number(await lane.locator('td').nth(1).textContent());
  assert.ok(limit >= 1, `limit ${limit}`);
  // 429s and pauses are counted (a number, not '–').
  for (const col of [6, 7]) assert.match(await lane.locator('td').nth(col).textContent(), /^[\d,]+$/, `column ${col}`);

  const syncRow = page.locator('tr[data-batch]', { hasText: 'sync batch' });
  await syncRow.locator('.badge', { hasText: 'running' }).waitFor({ timeout: 10_000 });
  assert.equal(await syncRow.locator('button').isVisible(), false, 'only its client can cancel a sync batch');

  const smallRow = page.locator(`tr[data-batch="${small.id}"]`);
  await smallRow.locator('.badge', { hasText: 'completed' }).waitFor({ timeout: 10_000 });
  assert.match(await smallRow.locator('.progress-text').textContent(), /^60 \/ 60/);

  // The big job's progress moves on the page.
  const bigRow = page.locator(`tr[data-batch="${big.id}"]`);
  const done = async () => Number((await bigRow.locator('.progress-text b').textContent()).split(' / ')[0].replace(/,/g, ''));
  await bigRow.waitFor();
  const first = await done();
  await page.waitForFunction(
    ([id, n]) => {
      const b = document.querySelector(`tr[data-batch="${id}"] .progress-text b`);
      return b && Number(b.textContent.split(' / ')[0].replace(/,/g, '')) > n;
    },
    [big.id, first],
    { timeout: 20_000 },
  );
  const second = await done();
  // The job is a tenant of its lane, shown with its calls.
  await lane.locator('.tenant-name', { hasText: big.id }).waitFor({ timeout: 10_000 });
  assert.ok(second > first, `progress ${first} → ${second}`);
  await page.waitForFunction((id) => /\/s$/.test(document.querySelector(`tr[data-batch="${id}"] td:nth-child(6)`).textContent), big.id);
  assert.match(await bigRow.locator('td').nth(6).textContent(), /\d+ (s|m)/, 'an ETA');

  // Let the charts gather a few seconds, then take README's screenshot.
  await page.waitForTimeout(10_000);
  const shot = process.env.GOVERNOR_UI_SCREENSHOT
    ? path.resolve(REPO_ROOT, process.env.GOVERNOR_UI_SCREENSHOT)
    : path.join(os.tmpdir(), 'governor-ui.png');
  await page.screenshot({ path: shot, fullPage: true });
  t.diagnostic(`screenshot: ${shot}`);

  // Cancel: the button asks, posts to the job's cancel endpoint, and the job ends cancelled.
  await bigRow.locator('button', { hasText: 'Cancel' }).click();
  await bigRow.locator('.badge', { hasText: 'cancelled' }).waitFor({ timeout: 10_000 });
  const status = await api(`batches/${big.id}`);
  assert.equal(status.status, 'cancelled');
  assert.ok(status.counts.DID_NOT_RUN > 0, `counts ${JSON.stringify(status.counts)}`);
  assert.match(await bigRow.locator('button').textContent(), /Remove/);
  // Its rate counts the items that ran, not those that never did.
  const ran = status.counts.COMPLETED + status.counts.COMPLETED_WITH_RETRIES + status.counts.FAILED;
  const took = Date.parse(status.finished_at) - Date.parse(status.started_at);
  const shown = Number((await bigRow.locator('td').nth(5).textContent()).replace(/[,/s]/g, ''));
  assert.ok(Math.abs(shown - (ran * 1000) / took) <= 0.05, `rate ${shown}/s shown, ${ran} items ran in ${took} ms`);

  // Remove forgets a finished job: it leaves the page and the API.
  await smallRow.locator('button', { hasText: 'Remove' }).click();
  await smallRow.waitFor({ state: 'detached', timeout: 10_000 });
  assert.equal((await fetch(`${gov.url}/governor/batches/${small.id}`, { headers: { 'X-Governor-Token': TOKEN } })).status, 404);

  // The sync batch's client leaves: the batch is cancelled and leaves the page.
  syncClient.abort();
  assert.equal((await syncBatch).name, 'AbortError');
  await syncRow.waitFor({ state: 'detached', timeout: 10_000 });

  assert.deepEqual(problems, []);
  await page.close();
});

// An operator asks why calls wait: against a provider whose token budget
// binds, the lane's row says its calls wait for the token budget, and
// shows the budget the lane learned.
test('the live page says what holds a lane back', { skip, timeout: 60_000 }, async () => {
  // 3,000 tokens a minute and calls of about 100: some 30 go at once,
  // the others wait for the budget to refill.
  const tpm = await startMock(['-tpm', '3000', '-latency', '20ms']);
  const g = await startGovernor(tpm.url);
  const callers = new AbortController();
  try {
    const calls = Array.from({ length: 45 }, (_, i) =>
      fetch(`${g.url}/v1/chat/completions`, {
        method: 'POST',
        signal: callers.signal,
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sk-budget' },
        body: JSON.stringify({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: `q${i}` }] }),
      })
        .then((r) => r.arrayBuffer())
        .catch((e) => e),
    );
    const page = await browser.newPage({ viewport: { width: 1360, height: 600 } });
    await page.goto(`${g.url}/governor/ui`);
    const lane = page.locator('tr[data-lane]', { hasText: MODEL });
    await lane.locator('.sub.why', { hasText: 'for the token budget' }).waitFor({ timeout: 20_000 });
    await lane.locator('.badge', { hasText: 'token budget' }).waitFor();
    assert.match(await lane.locator('.lane-budgets').textContent(), /^budget 3,000 tokens\/min$/);
    assert.equal(await page.locator('#redis').isVisible(), false, 'no Redis configured: no Redis badge');
    const lanes = await (await fetch(`${g.url}/governor/lanes`)).json();
    assert.equal(lanes.redis, undefined);
    assert.equal(lanes.lanes[0].queue_capacity, 10000);
    await page.close();
    // The callers waiting for the refill give up.
    callers.abort();
    await Promise.all(calls);
  } finally {
    await Promise.allSettled([g.stop(), tpm.stop()]);
  }
});

// limitFileSize sets the size beyond which process pid cannot write a file
// (RLIMIT_FSIZE, with util-linux's prlimit): its batch directory then
// refuses results as a full disk does.
async function limitFileSize(pid, bytes) {
  await promisify(execFile)('prlimit', ['--pid', String(pid), `--fsize=${bytes}:unlimited`]);
}

// A job whose batch directory stops taking its results (a full disk; here
// a file size limit) is shown stalled, with why, and the badge goes once
// the directory takes results again and the job goes on.
test('the live page shows a stalled job', { skip, timeout: 60_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'governor-ui-stalled-'));
  const g = await startGovernor(mock.url, { GOVERNOR_BATCH_DIR: dir });
  try {
    // The job's files fit; a journal of its results does not.
    await limitFileSize(g.proc.child.pid, 32 * 1024);
    const requests = Array.from({ length: 120 }, (_, i) => ({
      custom_id: `s${i}`,
      url: '/v1/chat/completions',
      body: { model: MODEL, messages: [{ role: 'user', content: `item ${i}` }] },
    }));
    const r = await fetch(`${g.url}/governor/batches`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ requests }),
    });
    const job = await r.json();
    assert.equal(r.status, 202, JSON.stringify(job));

    const page = await browser.newPage({ viewport: { width: 1360, height: 600 } });
    await page.goto(`${g.url}/governor/ui`);
    const row = page.locator(`tr[data-batch="${job.id}"]`);
    const badge = row.locator('.badge', { hasText: 'stalled' });
    await badge.waitFor({ timeout: 20_000 });
    assert.match(await badge.getAttribute('title'), /results cannot be written to the batch directory \(.*file too large/);
    assert.match(await row.locator('.sub.why').textContent(), /batch directory full/);
    assert.equal(await row.locator('td:nth-child(7)').textContent(), '–', 'no ETA while stalled');

    await limitFileSize(g.proc.child.pid, 'unlimited');
    await row.locator('.badge', { hasText: 'completed' }).waitFor({ timeout: 30_000 });
    assert.equal(await badge.count(), 0, 'no longer stalled');
    await page.close();
  } finally {
    await g.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// An operator asks why a lane slowed down: after the provider answers 529
// (overloaded), the lane's Last decrease cell says so, not just "after a
// 429", and its tooltip says what that means.
test('the live page says why a lane slowed down', { skip, timeout: 60_000 }, async () => {
  const m = await startMock(['-latency', '20ms']);
  const g = await startGovernor(m.url);
  try {
    const call = (headers) =>
      fetch(`${g.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sk-cause', ...headers },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
      });
    assert.equal((await call({})).status, 200);
    // The provider overloaded: no retry asked, so the 529 comes back.
    assert.equal((await call({ 'X-Mock-Fault': '529', 'X-Governor-Max-Retries': '0' })).status, 529);
    const lanes = await (await fetch(`${g.url}/governor/lanes`)).json();
    assert.equal(lanes.lanes[0].last_decrease_cause, 'overloaded');

    const page = await browser.newPage({ viewport: { width: 1360, height: 600 } });
    await page.goto(`${g.url}/governor/ui`);
    const cell = page.locator('tr[data-lane]', { hasText: MODEL }).locator('td', { hasText: 'provider overloaded (529)' });
    await cell.waitFor({ timeout: 10_000 });
    assert.match(await cell.getAttribute('title'), /short of capacity/);
    await page.close();
  } finally {
    await Promise.allSettled([g.stop(), m.stop()]);
  }
});

// An operator asks which lane turns calls away: a lane whose queue is
// full says, in its Waiting cell, how many calls it turned away.
test('the live page says which lane turned calls away', { skip, timeout: 60_000 }, async () => {
  const m = await startMock(['-latency', '20s']);
  const g = await startGovernor(m.url, { GOVERNOR_MAX_CONCURRENCY: '1', GOVERNOR_QUEUE_CAPACITY: '1' });
  const callers = new AbortController();
  const call = () =>
    fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      signal: callers.signal,
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sk-full' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
  const held = [call().catch((e) => e)];
  try {
    // One call in flight (the limit is 1), then one waiting (the queue
    // holds 1): the next is turned away.
    const lanes = async () => (await (await fetch(`${g.url}/governor/lanes`)).json()).lanes;
    while (!(await lanes()).some((l) => l.in_flight === 1)) await sleep(20);
    held.push(call().catch((e) => e));
    while (!(await lanes()).some((l) => l.queued === 1)) await sleep(20);
    const refused = await call();
    assert.equal(refused.status, 503);
    assert.equal((await refused.json()).error.code, 'queue_full');
    assert.deepEqual((await lanes())[0].refused, { queue_full: 1, queue_timeout: 0 });

    const page = await browser.newPage({ viewport: { width: 1360, height: 600 } });
    await page.goto(`${g.url}/governor/ui`);
    const lane = page.locator('tr[data-lane]', { hasText: MODEL });
    await lane.locator('.sub.why', { hasText: '1 queue full' }).waitFor({ timeout: 10_000 });
    await page.close();
  } finally {
    callers.abort();
    await Promise.all(held);
    await Promise.allSettled([g.stop(), m.stop()]);
  }
});

// An operator asks whether the provider is down: a lane whose attempts
// fail (nothing listens at its upstream) shows "upstream failing", and
// GET /governor/lanes counts the failures by outcome.
test('the live page says a lane\'s provider fails', { skip, timeout: 60_000 }, async () => {
  const g = await startGovernor('http://127.0.0.1:1'); // nothing listens (tcpmux)
  try {
    const call = () =>
      fetch(`${g.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer sk-down', 'X-Governor-Max-Retries': '0' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
      });
    assert.equal((await call()).status, 502);
    const page = await browser.newPage({ viewport: { width: 1360, height: 600 } });
    await page.goto(`${g.url}/governor/ui`);
    const lane = page.locator('tr[data-lane]', { hasText: MODEL });
    await lane.waitFor();
    assert.equal(await lane.locator('.badge', { hasText: 'upstream failing' }).count(), 0, 'no failure seen by the page yet');
    // A failure while the page watches.
    assert.equal((await call()).status, 502);
    const b = lane.locator('.badge', { hasText: 'upstream failing' });
    await b.waitFor({ timeout: 10_000 });
    assert.match(await b.getAttribute('title'), /2 connection_error/);
    const lanes = (await (await fetch(`${g.url}/governor/lanes`)).json()).lanes;
    assert.equal(lanes[0].failures.connection_error, 2);
    await page.close();
  } finally {
    await g.stop();
  }
});
