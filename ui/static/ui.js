// Governor's live page: polls the JSON API every second and renders lanes
// and batches. Every value from the API reaches the page as text
// (textContent), never as markup: model names and ids come from clients.
'use strict';

(() => {
  const POLL_MS = 1000;
  const HISTORY_MS = 5 * 60 * 1000; // what the charts show
  const RATE_WINDOW_MS = 20 * 1000; // a batch's rate is measured over this
  const TOKEN_KEY = 'governor.token';
  const TOKEN_HEADER = 'X-Governor-Token';
  const SVG = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat('en-US');
  const nf1 = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || '',
    timer: 0,
    polling: false, // a poll is under way
    again: false, // poll again as soon as it ends
    lanes: new Map(), // id → {row, c: its cells, history}
    batches: new Map(), // kind:id → {row, c: its cells, samples}
  };

  class Unauthorized extends Error {}

  // api calls Governor's API at a path relative to the page (/governor/ui),
  // with the token when there is one.
  async function api(path, init = {}) {
    const headers = { Accept: 'application/json' };
    if (state.token) headers[TOKEN_HEADER] = state.token;
    const r = await fetch(path, { ...init, headers, cache: 'no-store', credentials: 'omit' });
    if (r.status === 401) throw new Unauthorized('unauthorized');
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new Error(body?.error?.message || `${path}: HTTP ${r.status}`);
    return body;
  }

  // ---- formatting ----

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function count(n) {
    return n === undefined || n === null ? '–' : nf.format(n);
  }

  function duration(ms) {
    if (!isFinite(ms) || ms < 0) return '–';
    const s = Math.round(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} m ${String(s % 60).padStart(2, '0')} s`;
    return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} m`;
  }

  function ago(iso, now) {
    if (!iso) return '';
    return `${duration(Math.max(0, now - Date.parse(iso)))} ago`;
  }

  function latency(ms) {
    if (!ms) return '–';
    return ms < 1000 ? `${Math.round(ms)} ms` : `${nf1.format(ms / 1000)} s`;
  }

  // setNum writes a count into a cell, dimmed when zero.
  function setNum(cell, n, hotWhenPositive = false) {
    cell.textContent = count(n);
    cell.classList.toggle('zero', n === 0);
    cell.classList.toggle('hot', hotWhenPositive && n > 0);
  }

  // ---- status and token ----

  function setStatus(kind, text) {
    $('status').dataset.state = kind;
    $('status-text').textContent = text;
  }

  function askToken(refused) {
    clearTimeout(state.timer);
    setStatus('token', 'API token required');
    $('token-form').hidden = false;
    $('token-error').hidden = !refused;
    $('token').focus();
  }

  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = $('token').value.trim();
    $('token').value = '';
    sessionStorage.setItem(TOKEN_KEY, state.token);
    $('token-form').hidden = true;
    poll();
  });

  $('forget-token').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = '';
    poll();
  });

  // ---- lanes ----

  // laneRow makes the row of a lane and keeps its cells for updates.
  function laneRow() {
    const row = el('tr');
    const c = {};
    const td = (name, cls) => {
      c[name] = el('td', cls);
      row.append(c[name]);
      return c[name];
    };
    const lane = td('lane', 'lane-col');
    c.model = el('span', 'lane-model');
    c.badges = el('span', 'badges');
    c.meta = el('div', 'lane-meta');
    c.budgets = el('div', 'lane-budgets');
    c.tenants = el('div', 'tenants');
    lane.append(c.model, c.badges, c.meta, c.budgets, c.tenants);
    for (const n of ['limit', 'target', 'inflight', 'waiting', 'latency', 'r429', 'pauses', 'collapses']) td(n, 'num');
    td('decrease');
    c.limitChart = chart();
    c.rlChart = chart();
    td('chart1').append(c.limitChart);
    td('chart2').append(c.rlChart);
    return { row, c, history: [] };
  }

  function badge(text, cls, title) {
    const b = el('span', `badge ${cls}`, text);
    if (title) b.title = title;
    return b;
  }

  // rateLimited is a lane's count of 429 and 529 answers, when the API
  // reports it.
  function rateLimited(l) {
    return typeof l.rate_limited === 'number' ? l.rate_limited : undefined;
  }

  // budgetText describes the provider's budgets a lane paces by, when it
  // has learned any: "3,000 tokens/min · 1,170 requests/min".
  function budgetText(l) {
    const parts = (l.token_budgets || []).map((b) => `${count(Math.round(b.per_minute))} ${b.kind.replace('_', ' ')}/min`);
    if (l.request_budget) parts.push(`${count(Math.round(l.request_budget.per_minute))} requests/min`);
    return parts.join(' · ');
  }

  // budgetTitle says what is left of each budget and the lane's share.
  function budgetTitle(l) {
    const left = (b) => {
      const share = `${Math.round(b.share * 100)}% of it this lane's`;
      // Below 0: calls booked ahead of the refill, which wait for it.
      if (b.remaining < 0) return `${count(Math.round(-b.remaining))} booked ahead of the refill, ${share}`;
      return `${count(Math.round(b.remaining))} left now, ${share}`;
    };
    const lines = (l.token_budgets || []).map((b) => `${b.kind.replace('_', ' ')}: ${count(Math.round(b.per_minute))}/min, ${left(b)}`);
    if (l.request_budget) lines.push(`requests: ${count(Math.round(l.request_budget.per_minute))}/min, ${left(l.request_budget)}`);
    return lines.join('\n');
  }

  // WAITS_FOR says, for each value of a lane's limited_by, what its
  // waiting calls wait for.
  const WAITS_FOR = {
    limit: 'for the limit',
    token_budget: 'for the token budget',
    request_budget: 'for the request budget',
    connections: 'for a connection',
    paused: 'for Retry-After',
  };

  // FAILING_MS is how long a lane shows "upstream failing" after an
  // attempt of it failed.
  const FAILING_MS = 10_000;

  function renderLane(entry, l, now) {
    const { c } = entry;
    c.model.textContent = l.model || '(no model)';
    c.meta.textContent = `${l.upstream} · key ${l.credential || 'none'}`;
    c.meta.title = l.id;
    const budgets = budgetText(l);
    c.budgets.hidden = !budgets;
    c.budgets.textContent = budgets ? `budget ${budgets}` : '';
    c.budgets.title = budgetTitle(l);

    const badges = [];
    if (l.paused_until) {
      const left = Date.parse(l.paused_until) - now;
      badges.push(badge(left > 500 ? `paused ${duration(left)}` : 'paused', 'warn', `Paused until ${l.paused_until}`));
    }
    if (l.collapsed) badges.push(badge('collapsed', 'bad', 'Too many errors at once: the limit fell to 1'));
    // Attempts that got no usable answer lately: the provider is down,
    // hangs or fails.
    const failures = Object.entries(l.failures || {}).filter(([, n]) => n > 0);
    const failed = failures.reduce((sum, [, n]) => sum + n, 0);
    if (entry.failed !== undefined && failed > entry.failed) entry.failedAt = now;
    entry.failed = failed;
    if (entry.failedAt && now - entry.failedAt < FAILING_MS) {
      const title = `Attempts failed in the last ${FAILING_MS / 1000} s (since the lane was made: ${failures.map(([o, n]) => `${count(n)} ${o}`).join(', ')}); the log's "upstream attempt failed" lines say why`;
      badges.push(badge('upstream failing', 'bad', title));
    }
    if (l.coordinated) badges.push(badge(`shared × ${l.members}`, 'info', 'Governed with the other Governors on Redis'));
    if (l.parked) badges.push(badge('idle', 'info', 'No call for a while: its share is given back to the other Governors (its limit reads 0) until its next call'));
    if (l.conn_limited) {
      const title = `The upstream's ${l.upstream_max_conns} connections are all in use (${l.upstream_in_flight} calls in flight)`;
      badges.push(badge('connections full', 'warn', title));
    }
    if (l.limited_by === 'token_budget' || l.limited_by === 'request_budget') {
      const what = l.limited_by === 'token_budget' ? 'token budget' : 'request budget';
      badges.push(badge(what, 'warn', `Calls wait for the provider's ${what} before they are sent\n${budgetTitle(l)}`));
    }
    c.badges.replaceChildren(...badges);

    c.limit.textContent = count(l.limit);
    if (l.coordinated && l.shared_limit !== l.limit) c.limit.append(el('span', 'sub', `of ${count(l.shared_limit)}`));
    c.target.textContent = nf1.format(l.target);
    setNum(c.inflight, l.in_flight);
    if (l.held > 0) {
      c.inflight.append(el('span', 'sub', `${count(l.held)} held`));
      c.inflight.title = `${count(l.held)} of them wait for the provider's request or token budget before they are sent`;
    } else {
      c.inflight.title = '';
    }

    setNum(c.waiting, l.queued);
    const waitsFor = WAITS_FOR[l.limited_by];
    // Waiting for the limit is governance at work; anything else is
    // worth a look.
    if (waitsFor) c.waiting.append(el('span', l.limited_by === 'limit' ? 'sub' : 'sub why', waitsFor));
    const urg = Object.entries(l.queued_by_urgency || {}).sort(([a], [b]) => a.localeCompare(b));
    if (urg.length) c.waiting.append(el('span', 'sub', urg.map(([u, n]) => `${u}: ${n}`).join('  ')));
    const full = l.queue_capacity > 0 && l.queued >= l.queue_capacity;
    c.waiting.classList.toggle('hot', full);
    c.waiting.title = l.queue_capacity ? `${count(l.queued)} of the ${count(l.queue_capacity)} calls the queue holds${full ? ': full, new calls get queue_full' : ''}` : '';
    // Calls turned away since the lane was made: a full queue, or a wait
    // past GOVERNOR_QUEUE_TIMEOUT.
    const refused = l.refused || {};
    const turnedAway = Object.entries(refused).filter(([, n]) => n > 0);
    if (turnedAway.length) {
      c.waiting.append(el('span', 'sub why', turnedAway.map(([code, n]) => `${count(n)} ${code.replace('_', ' ')}`).join(' · ')));
      c.waiting.title += `${c.waiting.title ? '\n' : ''}Calls turned away since the lane was made: ${turnedAway.map(([code, n]) => `${count(n)} ${code}`).join(', ')}`;
    }

    c.latency.textContent = latency(l.latency_ewma_ms);
    setNum(c.r429, rateLimited(l));
    if (l.overloaded > 0) {
      c.r429.append(el('span', 'sub', `${count(l.overloaded)} × 529`));
      c.r429.title = `${count(l.overloaded)} of them said the provider is overloaded (529, overloaded_error), not that the account's limit is reached`;
    } else {
      c.r429.title = '';
    }
    setNum(c.pauses, l.pauses);
    setNum(c.collapses, l.collapses, true);

    c.decrease.replaceChildren();
    if (l.last_decrease) {
      c.decrease.append(el('span', '', ago(l.last_decrease, now)));
      const cause = l.last_decrease_cause || l.last_decrease_reason;
      const why = cause ? reasonText(cause) : `${count(l.decreases)} ${l.decreases === 1 ? 'decrease' : 'decreases'}`;
      c.decrease.append(el('span', 'sub', why));
      c.decrease.title = `${l.last_decrease}${CAUSE_HELP[cause] ? `\n${CAUSE_HELP[cause]}` : ''}`;
    } else {
      c.decrease.append(el('span', 'zero', 'never'));
    }

    renderTenants(c.tenants, l.tenants);

    const h = entry.history;
    h.push({ t: now, limit: l.limit, inFlight: l.in_flight, rl: rateLimited(l) });
    while (h.length && h[0].t < now - HISTORY_MS) h.shift();
    drawLimit(c.limitChart, h, now);
    draw429(c.rlChart, h, now);
  }

  // reasonText says in a few words what made a lane's limit fall: its
  // last_decrease_cause (or, from an older Governor, its
  // last_decrease_reason).
  function reasonText(r) {
    const words = {
      rate_limited: 'after a 429',
      overloaded: 'provider overloaded (529)',
      request_budget: 'request budget spent',
      token_budget: 'token budget spent',
      timeout: 'after a timeout',
      latency: 'calls slowed down',
      other_governor: 'cut by another Governor',
    };
    return words[r] || String(r).replaceAll('_', ' ');
  }

  // CAUSE_HELP says what each cause means for the operator, as the cell's
  // tooltip.
  const CAUSE_HELP = {
    rate_limited: "The provider answered 429 naming no exhausted budget: the account's concurrency or rate limit.",
    overloaded: "The provider answered 529 (overloaded): it is short of capacity, whatever the account's limits.",
    request_budget: "A 429 whose headers showed the account's request budget (RPM) spent.",
    token_budget: "A 429 that showed the account's token budget (TPM) without room for the call.",
    timeout: 'An attempt got no answer within GOVERNOR_ATTEMPT_TIMEOUT.',
    latency: 'Calls succeeded but took longer as the limit rose: the provider queues calls past its knee.',
    other_governor: 'Another Governor sharing the lane over Redis cut the shared limit.',
  };

  const MAX_TENANTS_SHOWN = 5;

  // renderTenants shows a lane's tenants, {tenant, queued, in_flight}
  // each, when more than one shares the lane or one has a name.
  function renderTenants(box, tenants) {
    box.replaceChildren();
    if (!Array.isArray(tenants) || !tenants.length || (tenants.length === 1 && !tenants[0].tenant)) return;
    for (const t of tenants.slice(0, MAX_TENANTS_SHOWN)) {
      const name = el('span', 'tenant-name', t.tenant || '(none)');
      name.title = t.tenant;
      box.append(name, el('span', 'tenant-load', `${count(t.in_flight ?? 0)} in flight · ${count(t.queued ?? 0)} waiting`));
    }
    if (tenants.length > MAX_TENANTS_SHOWN) box.append(el('span', 'tenant-name', `+ ${tenants.length - MAX_TENANTS_SHOWN} more`));
  }

  function renderLanes(lanes, now) {
    const tbody = $('lanes').tBodies[0];
    const seen = new Set();
    let inFlight = 0;
    let waiting = 0;
    let r429;
    for (const l of lanes) {
      seen.add(l.id);
      let entry = state.lanes.get(l.id);
      if (!entry) {
        entry = laneRow();
        entry.row.dataset.lane = l.id;
        state.lanes.set(l.id, entry);
      }
      tbody.append(entry.row); // keeps the API's order
      renderLane(entry, l, now);
      inFlight += l.in_flight;
      waiting += l.queued;
      if (rateLimited(l) !== undefined) r429 = (r429 || 0) + rateLimited(l);
    }
    for (const [id, entry] of state.lanes) {
      if (!seen.has(id)) {
        entry.row.remove();
        state.lanes.delete(id);
      }
    }
    $('lanes-empty').hidden = lanes.length > 0;
    $('sum-lanes').textContent = count(lanes.length);
    $('sum-inflight').textContent = count(inFlight);
    $('sum-waiting').textContent = count(waiting);
    $('sum-429').textContent = count(r429);
  }

  // renderRedis shows whether Redis coordination works, when Governor is
  // configured for it.
  function renderRedis(redis) {
    const b = $('redis');
    b.hidden = !redis;
    if (!redis) return;
    b.textContent = redis.up ? 'Redis: shared'
      : `Redis: lost${redis.cause ? ` (${redis.cause})` : ''}, governing alone`;
    b.className = `badge ${redis.up ? 'ok' : 'bad'}`;
    b.title = redis.up
      ? 'Lanes are shared with the other Governors on the same Redis'
      : 'Redis does not answer: each lane is governed here alone until it does, and Governors together may send more than the provider allows';
  }

  // ---- charts ----

  const W = 136;
  const H = 48;
  const TOP = 13; // room for the scale label

  function chart() {
    const s = document.createElementNS(SVG, 'svg');
    s.setAttribute('class', 'chart');
    s.setAttribute('viewBox', `0 0 ${W} ${H}`);
    s.setAttribute('preserveAspectRatio', 'none');
    return s;
  }

  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  // span is the time a chart covers: the shortest of SPANS that holds what
  // the page has seen, so a page just opened has readable charts.
  const SPANS = [15, 30, 60, 120, HISTORY_MS / 1000].map((s) => s * 1000);
  function span(h, now) {
    const seen = h.length ? now - h[0].t : 0;
    return SPANS.find((s) => s >= seen) ?? HISTORY_MS;
  }

  const spanText = (ms) => (ms < 60000 ? `${ms / 1000} s` : `${ms / 60000} min`);

  function frame(svg, max, label) {
    svg.replaceChildren(svgEl('line', { class: 'axis', x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5 }));
    const t = svgEl('text', { x: 1, y: 8 });
    t.textContent = label;
    svg.append(t);
    return (v) => H - 1 - (v / max) * (H - 1 - TOP);
  }

  // drawLimit draws the limit as a step line over the calls in flight.
  function drawLimit(svg, h, now) {
    const max = Math.max(1, ...h.map((p) => Math.max(p.limit, p.inFlight)));
    const sp = span(h, now);
    const y = frame(svg, max, `max ${max} · last ${spanText(sp)}`);
    const xOf = (t) => ((t - (now - sp)) / sp) * W;
    if (!h.length) return;
    let area = `M${xOf(h[0].t).toFixed(1)},${H - 1}`;
    let line = '';
    h.forEach((p, i) => {
      const x = xOf(p.t).toFixed(1);
      area += ` L${x},${y(p.inFlight).toFixed(1)}`;
      line += `${i ? ' H' + x + ' V' : 'M' + x + ','}${y(p.limit).toFixed(1)}`;
    });
    const last = xOf(h[h.length - 1].t).toFixed(1);
    area += ` L${last},${H - 1} Z`;
    svg.append(svgEl('path', { class: 'inflight', d: area }), svgEl('path', { class: 'limit', d: line }));
  }

  // draw429 draws the 429s of each bucket of time as a bar: 30 bars over
  // the chart's span.
  function draw429(svg, h, now) {
    const sp = span(h, now);
    const n = 30;
    const bucketMs = sp / n;
    const buckets = new Array(n).fill(0);
    for (let i = 1; i < h.length; i++) {
      const a = h[i - 1].rl;
      const b = h[i].rl;
      if (a === undefined || b === undefined || b < a) continue;
      const k = Math.min(n - 1, Math.floor((h[i].t - (now - sp)) / bucketMs));
      if (k >= 0) buckets[k] += b - a;
    }
    const max = Math.max(...buckets);
    const reported = h.some((p) => p.rl !== undefined);
    const peak = reported ? `peak ${nf1.format((max * 1000) / bucketMs)}/s` : 'not reported';
    const y = frame(svg, Math.max(1, max), peak);
    const bw = W / n;
    buckets.forEach((v, k) => {
      if (v > 0) svg.append(svgEl('rect', { class: 'bar', x: (k * bw + 1).toFixed(1), y: y(v).toFixed(1), width: (bw - 2).toFixed(1), height: (H - 1 - y(v)).toFixed(1) }));
    });
  }

  // ---- batches ----

  const FINISHED = ['COMPLETED', 'COMPLETED_WITH_RETRIES', 'FAILED', 'DID_NOT_RUN'];

  function batchRow() {
    const row = el('tr');
    const c = {};
    const td = (name, cls) => {
      c[name] = el('td', cls);
      row.append(c[name]);
      return c[name];
    };
    td('id');
    c.idText = el('span', 'batch-id');
    c.kind = el('span', 'sub');
    c.id.append(c.idText, c.kind);
    td('status');
    const prog = td('progress');
    const wrap = el('div', 'progress');
    c.track = el('div', 'bar-track');
    c.track.setAttribute('role', 'progressbar');
    c.track.setAttribute('aria-valuemin', '0');
    c.segs = ['seg-done', 'seg-retried', 'seg-failed', 'seg-notrun'].map((cls) => el('span', cls));
    c.track.append(...c.segs);
    c.text = el('div', 'progress-text');
    wrap.append(c.track, c.text);
    prog.append(wrap);
    for (const n of ['failed', 'notrun', 'rate', 'eta', 'started']) td(n, 'num');
    td('action', 'action');
    c.button = el('button');
    c.button.type = 'button';
    c.action.append(c.button);
    return { row, c, samples: [] };
  }

  // rate measures items finished per second over RATE_WINDOW_MS of polls,
  // or since the start while the page has seen less than two polls.
  function rate(entry, b, done, now) {
    const s = entry.samples;
    s.push({ t: now, done });
    while (s.length > 2 && s[0].t < now - RATE_WINDOW_MS) s.shift();
    const first = s[0];
    if (now - first.t >= 2000) return ((done - first.done) * 1000) / (now - first.t);
    if (b.started_at) {
      const since = now - Date.parse(b.started_at);
      if (since > 0) return (done * 1000) / since;
    }
    return undefined;
  }

  function renderBatch(entry, b, now, sync) {
    const { c } = entry;
    const counts = b.counts || {};
    const n = (k) => counts[k] || 0;
    const done = FINISHED.reduce((a, k) => a + n(k), 0);
    const total = b.total || 0;
    const running = b.status === 'running';

    c.idText.textContent = b.id;
    c.kind.textContent = sync ? 'sync batch' : 'async job';
    const cls = { running: 'info', completed: 'ok', cancelled: 'warn' }[b.status] || '';
    c.status.replaceChildren(badge(b.status, cls, b.stopped ? `Stopped: ${b.stopped}` : ''));
    if (b.stopped && b.stopped !== b.status) c.status.append(el('span', 'sub', b.stopped.replaceAll('_', ' ')));
    // A running job whose batch directory does not take its results (a
    // full disk) waits, and goes on by itself once they can be written.
    const stalled = running && b.stalled;
    if (stalled) {
      c.status.append(' ', badge('stalled', 'warn', b.stalled), el('span', 'sub why', 'batch directory full: waiting for room'));
    }

    const pct = (k) => (total ? `${(n(k) * 100) / total}%` : '0%');
    ['COMPLETED', 'COMPLETED_WITH_RETRIES', 'FAILED', 'DID_NOT_RUN'].forEach((k, i) => {
      c.segs[i].style.width = pct(k);
    });
    c.track.setAttribute('aria-valuemax', String(total));
    c.track.setAttribute('aria-valuenow', String(done));
    c.track.title = FINISHED.map((k) => `${k}: ${n(k)}`).join('\n') + (running ? `\nPENDING: ${total - done}` : '');
    c.text.replaceChildren(el('b', '', `${count(done)} / ${count(total)}`), ` · ${total ? Math.floor((done * 100) / total) : 0}%`);

    setNum(c.failed, n('FAILED'), true);
    setNum(c.notrun, n('DID_NOT_RUN'));

    if (running) {
      const r = rate(entry, b, done, now);
      c.rate.textContent = r === undefined ? '–' : `${nf1.format(r)}/s`;
      c.eta.textContent = r > 0 && !stalled ? duration(((total - done) / r) * 1000) : '–';
      c.eta.title = stalled ? 'None while the job is stalled' : 'Time left at the current rate';
    } else {
      // Items that ran per second: those that did not run (a cancelled or
      // stopped job's) took no time of the provider's.
      const took = b.started_at && b.finished_at ? Date.parse(b.finished_at) - Date.parse(b.started_at) : NaN;
      const ran = done - n('DID_NOT_RUN');
      c.rate.textContent = took > 0 ? `${nf1.format((ran * 1000) / took)}/s` : '–';
      c.eta.textContent = isFinite(took) ? `took ${duration(took)}` : '–';
      c.eta.title = 'Time the batch took';
    }
    c.started.textContent = b.started_at ? ago(b.started_at, now) : 'waiting';

    if (sync) {
      c.button.hidden = true;
    } else if (!c.button.dataset.busy) {
      c.button.hidden = false;
      c.button.textContent = running ? 'Cancel' : 'Remove';
      c.button.className = running ? 'danger' : '';
      c.button.title = running
        ? 'Cancel: items not started become DID_NOT_RUN, items in flight are cut'
        : 'Forget this job and its results';
      c.button.onclick = () => removeBatch(entry, b.id, running);
    }
  }

  async function removeBatch(entry, id, running) {
    const question = running
      ? `Cancel batch ${id}? Items not started become DID_NOT_RUN; items in flight are cut.`
      : `Forget batch ${id} and its results?`;
    if (!window.confirm(question)) return;
    const btn = entry.c.button;
    btn.dataset.busy = '1';
    btn.disabled = true;
    btn.textContent = running ? 'Cancelling…' : 'Removing…';
    try {
      // Cancel by the cancel endpoint: a job that finished while the
      // question waited keeps its results, where DELETE would forget it.
      await api(`batches/${encodeURIComponent(id)}${running ? '/cancel' : ''}`, { method: running ? 'POST' : 'DELETE' });
    } catch (e) {
      if (e instanceof Unauthorized) return askToken(true);
      setStatus('error', `Could not ${running ? 'cancel' : 'remove'} ${id}: ${e.message}`);
    } finally {
      delete btn.dataset.busy;
      btn.disabled = false;
    }
    poll();
  }

  function renderBatches(data, now) {
    const tbody = $('batches').tBodies[0];
    const list = [
      ...(data.batches || []).map((b) => ({ b, sync: false })),
      ...(data.sync || []).map((b) => ({ b, sync: true })),
    ];
    const seen = new Set();
    let running = 0;
    for (const { b, sync } of list) {
      const key = `${sync ? 'sync' : 'job'}:${b.id}`;
      seen.add(key);
      let entry = state.batches.get(key);
      if (!entry) {
        entry = batchRow();
        entry.row.dataset.batch = b.id;
        state.batches.set(key, entry);
      }
      tbody.append(entry.row);
      renderBatch(entry, b, now, sync);
      if (b.status === 'running') running++;
    }
    for (const [key, entry] of state.batches) {
      if (!seen.has(key)) {
        entry.row.remove();
        state.batches.delete(key);
      }
    }
    $('batches-empty').hidden = list.length > 0;
    $('sum-batches').textContent = count(running);
  }

  // ---- polling ----

  // poll fetches and renders, then schedules the next poll. Called while
  // a poll is under way (after a cancel), it has that one poll again at once.
  async function poll() {
    clearTimeout(state.timer);
    if (state.polling) {
      state.again = true;
      return;
    }
    state.polling = true;
    state.again = false;
    try {
      const [lanes, batches] = await Promise.all([api('lanes'), api('batches?sync=true')]);
      const now = Date.now();
      $('token-form').hidden = true;
      $('forget-token').hidden = !state.token;
      renderLanes(lanes.lanes || [], now);
      renderRedis(lanes.redis);
      renderBatches(batches, now);
      setStatus('live', `Live · updated ${new Date(now).toLocaleTimeString()}`);
    } catch (e) {
      if (e instanceof Unauthorized) {
        state.polling = false;
        return askToken(state.token !== '');
      }
      setStatus('error', `Governor unreachable: ${e.message}`);
    }
    state.polling = false;
    state.timer = setTimeout(poll, state.again ? 0 : POLL_MS);
  }

  poll();
})();
