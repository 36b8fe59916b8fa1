// Test harness: builds (or takes) the governor and mockllm binaries, starts
// real processes on free loopback ports, and stops them whatever happens.
//
// Environment:
//   GOVERNOR_BIN, MOCKLLM_BIN  prebuilt binaries; unset, they are built with
//                              `go build` into a temporary directory.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';

const execFileP = promisify(execFile);

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const live = new Set();
function killAll() {
  for (const p of live) {
    try {
      p.kill('SIGKILL');
    } catch {}
  }
}
// Last resort if a test file dies or is stopped without running its
// teardown: no governor or mockllm outlives the test process.
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    killAll();
    // Keep the signal's usual effect unless someone else handles it.
    if (process.listenerCount(sig) === 1) process.exit(128 + os.constants.signals[sig]);
  });
}

let built;

// binaries returns {governor, mockllm}: the paths from GOVERNOR_BIN and
// MOCKLLM_BIN, or binaries built from this repository.
export async function binaries() {
  if (built) return built;
  built = (async () => {
    let governor = process.env.GOVERNOR_BIN;
    let mockllm = process.env.MOCKLLM_BIN;
    if (governor && mockllm) return { governor, mockllm };
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'governor-e2e-bin-'));
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    const build = async (pkg, out) => {
      await execFileP('go', ['build', '-o', out, pkg], { cwd: REPO_ROOT, maxBuffer: 16 << 20 });
      return out;
    };
    [governor, mockllm] = await Promise.all([
      governor || build('./cmd/governor', path.join(dir, 'governor')),
      mockllm || build('./cmd/mockllm', path.join(dir, 'mockllm')),
    ]);
    return { governor, mockllm };
  })();
  return built;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Proc wraps a child process and keeps the tail of its output.
class Proc {
  constructor(name, child) {
    this.name = name;
    this.child = child;
    this.output = '';
    this.exited = false;
    this.exitCode = null;
    live.add(child);
    const keep = (d) => {
      this.output += d.toString();
      if (this.output.length > 256 * 1024) this.output = this.output.slice(-128 * 1024);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    this.exitPromise = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exited = true;
        this.exitCode = code ?? signal;
        live.delete(child);
        resolve();
      });
    });
  }

  tail(lines = 30) {
    return this.output.split('\n').slice(-lines).join('\n');
  }

  // stop sends SIGTERM, then SIGKILL if the process is still there after
  // graceMs.
  async stop(graceMs = 3000) {
    if (this.exited) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => {
      if (!this.exited) this.child.kill('SIGKILL');
    }, graceMs);
    await this.exitPromise;
    clearTimeout(timer);
  }
}

// startMock starts mockllm on a free port with the given flags and resolves
// once it prints its address.
export async function startMock(flags = []) {
  const { mockllm } = await binaries();
  const child = spawn(mockllm, ['-listen', '127.0.0.1:0', ...flags], { stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = new Proc('mockllm', child);
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const m = /mockllm listening on (http:\/\/\S+)/.exec(proc.output);
    if (m) {
      const url = m[1];
      return {
        proc,
        url,
        stats: async () => {
          const r = await fetch(`${url}/stats`);
          if (!r.ok) throw new Error(`mockllm /stats: ${r.status}`);
          return r.json();
        },
        reset: async () => {
          const r = await fetch(`${url}/stats/reset`, { method: 'POST' });
          if (!r.ok) throw new Error(`mockllm /stats/reset: ${r.status}`);
        },
        stop: () => proc.stop(),
      };
    }
    if (proc.exited) break;
    await sleep(20);
  }
  await proc.stop();
  throw new Error(`mockllm did not start (exit ${proc.exitCode}):\n${proc.tail()}`);
}

// startGovernor starts governor in front of upstream (the default upstream
// and the route "anthropic") and resolves once its /readyz answers 200.
// env adds or overrides GOVERNOR_* variables.
//
// Governor binds ports of its own choosing (127.0.0.1:0) and reports them
// in its start-up line: ports picked free here and released could be
// taken by another process before governor binds them, and the test would
// then talk to that one.
export async function startGovernor(upstream, env = {}) {
  const { governor } = await binaries();
  const child = spawn(governor, [], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      GOVERNOR_LISTEN: '127.0.0.1:0',
      GOVERNOR_ADMIN_LISTEN: '127.0.0.1:0',
      GOVERNOR_UPSTREAM: upstream,
      GOVERNOR_ROUTES: `anthropic=${upstream}`,
      GOVERNOR_DRAIN_TIMEOUT: '2s',
      GOVERNOR_LOG_LEVEL: 'info',
      GOVERNOR_LOG_FORMAT: 'json',
      ...env,
    },
  });
  const proc = new Proc('governor', child);
  const deadline = Date.now() + 15_000;
  let addrs;
  while (Date.now() < deadline && !proc.exited) {
    addrs ??= startedAddrs(proc.output);
    if (addrs) {
      try {
        const r = await fetch(`http://${addrs.admin}/readyz`);
        await r.arrayBuffer();
        if (r.status === 200) {
          const url = `http://${addrs.listen}`;
          return {
            proc,
            url,
            admin: `http://${addrs.admin}`,
            openaiBaseURL: `${url}/v1`,
            anthropicBaseURL: `${url}/anthropic`,
            stop: () => proc.stop(),
          };
        }
      } catch {
        // not serving yet
      }
    }
    await sleep(25);
  }
  await proc.stop();
  throw new Error(`governor did not become ready (exit ${proc.exitCode}):\n${proc.tail()}`);
}

// startedAddrs returns the listeners' addresses from governor's start-up
// line ("governor started", JSON at info), or undefined before it.
function startedAddrs(output) {
  for (const line of output.split('\n')) {
    if (!line.includes('"governor started"')) continue;
    try {
      const m = JSON.parse(line);
      if (m.msg === 'governor started') return { listen: m.listen, admin: m.admin_listen };
    } catch {
      // a line cut by the tail kept
    }
  }
  return undefined;
}

// header reads a response header from a Headers object or a plain record.
export function header(headers, name) {
  if (!headers) return undefined;
  if (typeof headers.get === 'function') return headers.get(name) ?? undefined;
  const key = Object.keys(headers).find((k) => k.toLowerCase() === name.toLowerCase());
  return key === undefined ? undefined : headers[key];
}

// uniqueId is a request id for X-Request-Id that no other test uses.
let seq = 0;
export function uniqueId(prefix) {
  return `${prefix}-${process.pid}-${Date.now()}-${++seq}`;
}
