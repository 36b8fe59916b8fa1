#!/usr/bin/env bash
# readme-examples.sh [FILE.md]: runs every curl example in README.md (or
# FILE.md) verbatim against `governor -demo` and checks the answers, so that
# README's examples are tested, not just written. Runs from any directory;
# needs bash, Go, curl and Node.js (for the JSON checks). Exit status 0 only
# if every example passed and at least one ran.
#
# Which code blocks run. Every fenced code block whose info string is sh, bash
# or shell and that has a curl command: a line (not a # comment) with the word
# `curl` followed by a space or the end of the line, e.g. `curl -s …`,
# `id=$(curl …)`, `… | xargs curl …`. Blocks without curl (`go run`,
# `export`, `./scripts/test.sh`) are not run. A curl command in a block tagged
# otherwise (```text, or no tag) is an error, unless marked readme-skip: no
# curl example goes untested by accident. No curl example at all is an error.
#
# How they run. Governor is built into a temp dir and started with -demo on
# README's own addresses, GOVERNOR_LISTEN=127.0.0.1:8080 and
# GOVERNOR_ADMIN_LISTEN=127.0.0.1:9090 (other GOVERNOR_* variables are
# cleared); if either is in use the script stops and says so. Once /readyz
# answers, the blocks run in README order, each as one bash script under
# `set -euo pipefail`, in a scratch working directory shared by all blocks
# (files one block writes, another can read); shell variables a block sets are
# carried to the blocks after it, so `id=$(curl …)` in one block and
# `curl …/$id` in a later one work. Each block has READMEX_TIMEOUT seconds
# (default 120). Governor is stopped on exit, whatever happens.
#
# What is checked. `curl` inside a block is a stand-in (first on PATH) that
# runs the real curl with the same arguments and records each answer's status,
# headers and body. A block passes when:
#   - it exits 0 and ran at least one curl;
#   - no curl failed and no answer had HTTP status >= 400 (the stand-in then
#     fails like `curl --fail-with-body`, so `set -e` stops the block there);
#   - every answer body is non-empty (except 204/304 and -I) and parses as its
#     Content-Type says: application/json or *+json as JSON;
#     application/x-ndjson or application/jsonl as one JSON value per line;
#     text/event-stream as SSE fields with JSON `data:` (`[DONE]` allowed);
#     text/* as non-empty text; any other type fails;
#   - every readme-check predicate above it is true (at least one is required).
# curl options the stand-in cannot honour fail the example with a message:
# -w/--write-out, -D/--dump-header, -O, -K/--config, -:/--next. -o FILE,
# -i and -I work as usual.
#
# Markers: HTML comments (invisible on GitHub) on the lines just above the
# opening fence of a block, one per line, blank lines allowed in between:
#   <!-- readme-check: JS-EXPRESSION -->   must be truthy (Node.js). Names:
#       body     the last answer, parsed: JSON value; array of lines for
#                NDJSON/JSONL; array of `data:` JSON values for SSE; text
#       status   its HTTP status (number)
#       headers  its headers, names lower-case (e.g. headers['x-governor-status'])
#       text     its raw body
#       answers  every answer of the block, in order: {status, headers, body, text}
#       stdout   everything the block printed
#     e.g. <!-- readme-check: body.choices[0].message.content.length > 0 -->
#   <!-- readme-expect: 4xx -->   (or an exact status such as 404) the block's
#     last answer must have that status; earlier answers must still be < 400.
#   <!-- readme-skip: REASON -->  do not run this block (it is listed as skip).
# A misspelt or misplaced readme- marker is an error.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readme="${1:-$root/README.md}"
[ -f "$readme" ] || { echo "readme-examples: $readme not found" >&2; exit 2; }
readme="$(cd "$(dirname "$readme")" && pwd)/$(basename "$readme")"
shown="${readme#"$root"/}"
listen=127.0.0.1:8080
admin=127.0.0.1:9090
block_timeout="${READMEX_TIMEOUT:-120}"

for tool in go curl node; do
  command -v "$tool" >/dev/null || { echo "readme-examples: $tool not found on PATH" >&2; exit 2; }
done
real_curl="$(command -v curl)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/governor-readme.XXXXXX")"
gov_pid="" block_pid=""
cleanup() {
  local rc=$?
  if [ -n "$block_pid" ]; then
    kill -TERM "$block_pid" 2>/dev/null || true # timeout(1) passes it on to the whole block
    wait "$block_pid" 2>/dev/null || true
  fi
  if [ -n "$gov_pid" ] && kill -0 "$gov_pid" 2>/dev/null; then
    kill -TERM "$gov_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$gov_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$gov_pid" 2>/dev/null || true
    wait "$gov_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$tmp/blocks" "$tmp/bin" "$tmp/work" "$tmp/answers"

# ---- extraction: README → blocks/NNN.sh (verbatim) + NNN.meta (line, first, markers)
awk -v dir="$tmp/blocks" -v errfile="$tmp/extract-errors" -v readme="$shown" '
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function err(line, msg) { printf "%s:%d: %s\n", readme, line, msg > errfile }
function drop_pending() {
  if (npend > 0) err(pend_line, "readme- marker not directly above a code block (put it on the lines just above the opening fence)")
  npend = 0
}
# first: the first line with curl in the block, shown in the report.
function finish(   i, l, hascurl, first, shell, skip, f, id) {
  hascurl = 0; first = ""
  for (i = 1; i <= nb; i++) {
    l = body[i]
    if (l ~ /^[ \t]*#/ || l ~ /^[ \t]*$/) continue
    if (l ~ /(^|[^A-Za-z0-9_.\/-])curl([ \t]|$)/) { if (!hascurl) first = trim(l); hascurl = 1 }
  }
  shell = (lang == "sh" || lang == "bash" || lang == "shell")
  skip = 0
  for (i = 1; i <= nmark; i++) if (mark[i] ~ /^skip\t/) skip = 1
  if (!hascurl) {
    if (nmark > 0) err(start, "readme- markers above a code block that has no curl command")
    return
  }
  if (!shell && !skip) {
    err(start, "a curl example in a ```" lang " block is not run: tag the block ```sh, or put <!-- readme-skip: REASON --> above it")
    return
  }
  n++; id = sprintf("%03d", n)
  f = dir "/" id ".sh"
  for (i = 1; i <= nb; i++) print body[i] > f
  close(f)
  f = dir "/" id ".meta"
  print "line\t" start > f
  print "first\t" first > f
  for (i = 1; i <= nmark; i++) print mark[i] > f
  close(f)
}
BEGIN { n = 0; npend = 0; infence = 0 }
{
  sub(/\r$/, "")
  line = $0
  if (!infence) {
    if (line ~ /^[ \t]*<!--[ \t]*readme-/) {
      if (line !~ /-->[ \t]*$/) { err(NR, "a readme- marker is one line: <!-- readme-KIND: VALUE -->"); next }
      m = line
      sub(/^[ \t]*<!--[ \t]*readme-/, "", m)
      sub(/[ \t]*-->[ \t]*$/, "", m)
      c = index(m, ":")
      kind = (c > 0) ? substr(m, 1, c - 1) : m
      val = (c > 0) ? trim(substr(m, c + 1)) : ""
      if (kind != "check" && kind != "expect" && kind != "skip") {
        err(NR, "unknown marker readme-" kind " (known: readme-check, readme-expect, readme-skip)"); next
      }
      if (val == "") { err(NR, "readme-" kind " needs a value: <!-- readme-" kind ": … -->"); next }
      if (kind == "expect" && val !~ /^[1-5]([0-9][0-9]|xx)$/) { err(NR, "readme-expect takes a status such as 404 or 4xx, not " val); next }
      if (npend == 0) pend_line = NR
      pend[++npend] = kind "\t" val
      next
    }
    if (line ~ /^[ \t]*$/) next
    if (match(line, /^ *(```+|~~~+)/)) {
      fence = substr(line, RSTART, RLENGTH)
      indent = fence; sub(/[`~]+$/, "", indent); indent = length(indent)
      fence = substr(fence, indent + 1)
      info = trim(substr(line, RSTART + RLENGTH)); sub(/[ \t{,].*$/, "", info)
      lang = tolower(info)
      infence = 1; start = NR; nb = 0
      nmark = npend
      for (i = 1; i <= npend; i++) mark[i] = pend[i]
      npend = 0
      next
    }
    drop_pending()
    next
  }
  if (line ~ /^ *(```+|~~~+)[ \t]*$/) {
    f = line; gsub(/[ \t]/, "", f)
    if (substr(f, 1, 1) == substr(fence, 1, 1) && length(f) >= length(fence)) { finish(); infence = 0; next }
  }
  k = 0
  while (k < indent && substr(line, 1, 1) == " ") { line = substr(line, 2); k++ }
  body[++nb] = line
}
END {
  if (infence) err(start, "code block never closed")
  drop_pending()
}' "$readme"

# ---- the curl stand-in: the real curl, plus a record of each answer
cat >"$tmp/bin/curl" <<'SHIM'
#!/usr/bin/env bash
# readme-examples: stands in for curl inside README examples. Runs the real
# curl with the same arguments, records the answer under $READMEX_ANSWERS/N,
# prints what curl would have printed, and fails on HTTP status >= 400.
set -u
real="$READMEX_REAL_CURL"
i=1
while ! mkdir "$READMEX_ANSWERS/$i" 2>/dev/null; do i=$((i + 1)); done
a="$READMEX_ANSWERS/$i"
printf '%s\0' curl "$@" >"$a/args"
unsupported() {
  echo "curl option $1 cannot be used in a README example (the harness captures the answer itself)" | tee "$a/unsupported" >&2
  exit 2
}
valued=AbcCdDeEFHKmoPQrtTuUwxXyYz # short options that take a value
args=() out="" include=0 head=0
while (($#)); do
  arg="$1"; shift
  case "$arg" in
    --output) out="${1-}"; shift || true ;;
    --include) include=1 ;;
    --head) head=1; args+=("$arg") ;;
    --write-out | --dump-header | --remote-name | --remote-name-all | --config | --next) unsupported "$arg" ;;
    --*) args+=("$arg") ;;
    -?*)
      flags=""
      rest="${arg#-}"
      while [ -n "$rest" ]; do
        c="${rest:0:1}"; rest="${rest:1}"
        if [[ "$valued" == *"$c"* ]]; then
          if [ -n "$rest" ]; then v="$rest"; rest=""; else v="${1-}"; shift || true; fi
          case "$c" in
            o) out="$v" ;;
            D | w | K) unsupported "-$c" ;;
            *) [ -n "$flags" ] && args+=("-$flags"); flags=""; args+=("-$c" "$v") ;;
          esac
        else
          case "$c" in
            i) include=1 ;;
            O | :) unsupported "-$c" ;;
            I) head=1; flags+="$c" ;;
            *) flags+="$c" ;;
          esac
        fi
      done
      [ -n "$flags" ] && args+=("-$flags")
      ;;
    *) args+=("$arg") ;;
  esac
done
echo "$head" >"$a/head"
"$real" "${args[@]}" -o "$a/body" -D "$a/headers" -w '%{http_code}\n%{content_type}\n' >"$a/w"
rc=$?
echo "$rc" >"$a/rc"
touch "$a/body" "$a/headers"
if [ -n "$out" ] && [ "$out" != - ]; then exec 3>"$out"; else exec 3>&1; fi
if [ "$include" = 1 ] && [ "$head" = 0 ]; then cat "$a/headers" "$a/body" >&3; else cat "$a/body" >&3; fi
exec 3>&-
[ "$rc" = 0 ] || exit "$rc"
status="$(head -n1 "$a/w")"
if [ "${status:-0}" -ge 400 ] && [ "${READMEX_EXPECT:-}" = "" ]; then
  echo "curl: HTTP $status (README examples must not fail; mark expected errors with readme-expect)" >&2
  exit 22
fi
exit 0
SHIM
chmod +x "$tmp/bin/curl"

# ---- the checker: statuses, bodies by content type, readme-check predicates
cat >"$tmp/check.mjs" <<'CHECK'
import fs from 'node:fs';
import path from 'node:path';

const [metaFile, ansDir, rcArg, stdoutFile, timeoutArg] = process.argv.slice(2);
const read = (f) => { try { return fs.readFileSync(f, 'utf8'); } catch { return undefined; } };
const meta = read(metaFile).split('\n').filter(Boolean).map((l) => {
  const i = l.indexOf('\t');
  return [l.slice(0, i), l.slice(i + 1)];
});
const checks = meta.filter(([k]) => k === 'check').map(([, v]) => v);
const expect = meta.find(([k]) => k === 'expect')?.[1];
const problems = [];
const oneLine = (s, n = 160) => { s = String(s).replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n) + '…' : s; };

const rc = Number(rcArg);
if (rc !== 0) {
  const why = { 124: ` (timed out after ${timeoutArg}s)`, 127: ' (a command was not found)', 22: ' (an answer had HTTP status >= 400)' }[rc] ?? '';
  problems.push(`the block exited with status ${rc}${why}`);
}

function parseHeaders(raw) {
  const blocks = raw.split(/\r?\n\r?\n/).filter((b) => b.trim() !== '');
  const h = {};
  for (const line of (blocks.at(-1) ?? '').split(/\r?\n/).slice(1)) {
    const i = line.indexOf(':');
    if (i <= 0) continue;
    const k = line.slice(0, i).trim().toLowerCase(), v = line.slice(i + 1).trim();
    h[k] = k in h ? `${h[k]}, ${v}` : v;
  }
  return h;
}

function jsonLine(l, where) {
  try { return JSON.parse(l); } catch (e) { throw new Error(`${where} is not JSON (${e.message}): ${oneLine(l, 80)}`); }
}

function parseBody(a) {
  const media = a.type.split(';')[0].trim();
  const t = a.text;
  if (a.head) return undefined;
  if (t.trim() === '') {
    if (a.status === 204 || a.status === 304) return undefined;
    throw new Error('empty body');
  }
  if (media === 'application/json' || media.endsWith('+json')) return jsonLine(t, 'the body');
  if (['application/x-ndjson', 'application/jsonl', 'application/jsonlines', 'application/x-jsonlines',
    'application/json-lines', 'application/x-jsonl'].includes(media)) {
    return t.split('\n').map((l, i) => [l, i]).filter(([l]) => l.trim() !== '').map(([l, i]) => jsonLine(l, `line ${i + 1}`));
  }
  if (media === 'text/event-stream') {
    const data = [];
    t.split(/\r?\n/).forEach((l, i) => {
      if (l === '' || l.startsWith(':')) return;
      const m = /^(data|event|id|retry)(?:: ?(.*))?$/.exec(l);
      if (!m) throw new Error(`line ${i + 1} is not an SSE field: ${oneLine(l, 80)}`);
      if (m[1] === 'data' && (m[2] ?? '').trim() !== '[DONE]') data.push(jsonLine(m[2] ?? '', `data on line ${i + 1}`));
    });
    if (data.length === 0) throw new Error('an event stream with no data');
    return data;
  }
  if (media.startsWith('text/')) return t;
  throw new Error(`Content-Type ${JSON.stringify(a.type)} is not JSON, NDJSON/JSONL, SSE or text`);
}

const shellWords = (words) => words.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`)).join(' ');
const statusMatches = (want, got) => (/^\dxx$/.test(want) ? String(got)[0] === want[0] : Number(want) === got);

const ids = fs.readdirSync(ansDir).filter((d) => /^\d+$/.test(d)).map(Number).sort((x, y) => x - y);
const answers = ids.map((n) => {
  const d = (f) => path.join(ansDir, String(n), f);
  const a = { n, args: shellWords((read(d('args')) ?? '').split('\0').slice(0, -1)), text: read(d('body')) ?? '', problems: [] };
  const unsupported = read(d('unsupported'));
  if (unsupported) { a.problems.push(unsupported.trim()); return a; }
  const curlRc = read(d('rc'));
  if (curlRc === undefined) { a.problems.push('did not finish'); return a; }
  if (Number(curlRc) !== 0) { a.problems.push(`curl exited with status ${curlRc.trim()}`); return a; }
  const [status, type] = (read(d('w')) ?? '').split('\n');
  a.status = Number(status);
  a.type = type ?? '';
  a.headers = parseHeaders(read(d('headers')) ?? '');
  a.head = (read(d('head')) ?? '').trim() === '1';
  return a;
});

if (answers.length === 0 && rc === 0) problems.push('the block ran no curl (is curl called directly, not through a full path?)');
answers.forEach((a, i) => {
  if (a.problems.length === 0) {
    const last = i === answers.length - 1;
    if (expect && last) {
      if (!statusMatches(expect, a.status)) a.problems.push(`HTTP ${a.status}, but readme-expect says ${expect}`);
    } else if (a.status >= 400) {
      a.problems.push(`HTTP ${a.status}${expect ? ' before the last answer' : ''}`);
    }
    try { a.body = parseBody(a); } catch (e) { a.problems.push(e.message); }
  }
  for (const p of a.problems) problems.push(`curl #${a.n}: ${p}`);
});

const last = answers.at(-1);
if (checks.length === 0) {
  problems.push('no <!-- readme-check: EXPRESSION --> above this block: say what its answer must contain');
} else if (last && last.problems.length === 0) {
  const scope = {
    body: last.body, status: last.status, headers: last.headers, text: last.text,
    answers: answers.map(({ status, headers, body, text }) => ({ status, headers, body, text })),
    stdout: read(stdoutFile) ?? '',
  };
  for (const expr of checks) {
    let ok;
    try {
      ok = new Function(...Object.keys(scope), `"use strict"; return (${expr}\n);`)(...Object.values(scope));
    } catch (e) {
      problems.push(`readme-check threw ${e.name}: ${e.message}: ${expr}`);
      continue;
    }
    if (!ok) problems.push(`readme-check is false: ${expr}`);
  }
}

if (problems.length > 0) {
  for (const p of problems) console.log(p);
  if (answers.length > 0) console.log('answers:');
  for (const a of answers) {
    console.log(`  #${a.n} ${oneLine(a.args, 120)}`);
    if (a.status !== undefined) console.log(`     HTTP ${a.status} ${a.type}, ${Buffer.byteLength(a.text)} bytes: ${oneLine(a.text)}`);
  }
  process.exit(1);
}
CHECK

# ---- one example: run it, check it, print its line
ran=0 passed=0 failed=0 skipped=0
indent() { sed 's/^/      /'; }

run_block() {
  local id="$1" line="" first="" skip="" expect="" k v
  while IFS=$'\t' read -r k v; do
    case "$k" in
      line) line="$v" ;;
      first) first="$v" ;;
      skip) skip="$v" ;;
      expect) expect=1 ;;
    esac
  done <"$tmp/blocks/$id.meta"
  [ "${#first}" -le 100 ] || first="${first:0:99}…"
  if [ -n "$skip" ]; then
    skipped=$((skipped + 1))
    printf 'skip  %s:%s  %s  (%s)\n' "$shown" "$line" "$first" "$skip"
    return
  fi
  ran=$((ran + 1))
  local answers="$tmp/answers/$id" runner="$tmp/blocks/$id.run" rc=0
  # Named after the README line, so that bash errors point at it.
  local src="$tmp/blocks/$(basename "$readme")-line-$line.sh"
  mkdir -p "$answers"
  # The block runs as one script; the variables it sets are saved for later blocks.
  cat >"$runner" <<RUN
set -euo pipefail
__rx_base=" \$(compgen -v | tr '\n' ' ') "
cd "$tmp/work"
if [ -f "$tmp/state" ]; then source "$tmp/state"; fi
source "$src"
for __rx_v in \$(compgen -v); do
  case "\$__rx_base" in *" \$__rx_v "*) continue ;; esac
  case "\$__rx_v" in __rx_* | BASH_* | FUNCNAME | PIPESTATUS | _) continue ;; esac
  declare -p "\$__rx_v"
done >"$tmp/state.new" 2>/dev/null || true
mv "$tmp/state.new" "$tmp/state"
RUN
  cp "$tmp/blocks/$id.sh" "$src"
  local to=()
  command -v timeout >/dev/null && to=(timeout -k 5 "$block_timeout")
  # In the background, so that a signal to this script is handled at once.
  (
    cd "$tmp/work"
    exec env -u BASH_ENV -u ENV PATH="$tmp/bin:$PATH" READMEX_REAL_CURL="$real_curl" \
      READMEX_ANSWERS="$answers" READMEX_EXPECT="$expect" "${to[@]}" bash "$runner"
  ) </dev/null >"$answers.stdout" 2>"$answers.stderr" &
  block_pid=$!
  wait "$block_pid" || rc=$?
  block_pid=""
  local report
  if report="$(node "$tmp/check.mjs" "$tmp/blocks/$id.meta" "$answers" "$rc" "$answers.stdout" "$block_timeout" 2>&1)"; then
    passed=$((passed + 1))
    printf 'ok    %s:%s  %s\n' "$shown" "$line" "$first"
  else
    failed=$((failed + 1))
    printf 'FAIL  %s:%s  %s\n' "$shown" "$line" "$first"
    printf '%s\n' "$report" | indent
    if [ -s "$answers.stderr" ]; then
      echo "      stderr:"
      tail -n 15 "$answers.stderr" | awk -v src="$src: line " -v off="$line" -v name="$shown" '{
        i = index($0, src)
        if (i) { rest = substr($0, i + length(src)); n = rest + 0; sub(/^[0-9]+/, "", rest); $0 = substr($0, 1, i - 1) name ":" (n + off) rest }
        print
      }' | indent
    fi
  fi
}

if ! compgen -G "$tmp/blocks/*.meta" >/dev/null; then
  cat "$tmp/extract-errors" 2>/dev/null || true
  echo "readme-examples: found no curl example in $shown (expected \`\`\`sh blocks with a curl command)" >&2
  exit 1
fi

# ---- governor -demo on README's addresses
port_busy() { (: <"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
for addr in "$listen" "$admin"; do
  if port_busy "$addr"; then
    echo "readme-examples: $addr is in use; README's examples use it verbatim, so stop what listens there and run again" >&2
    exit 1
  fi
done

echo "readme-examples: go build ./cmd/governor"
(cd "$root" && go build -o "$tmp/governor" ./cmd/governor)

unset_governor=()
for v in $(compgen -e); do
  case "$v" in GOVERNOR_*) unset_governor+=(-u "$v") ;; esac
done
env "${unset_governor[@]}" GOVERNOR_LISTEN="$listen" GOVERNOR_ADMIN_LISTEN="$admin" GOVERNOR_DRAIN_TIMEOUT=5s \
  "$tmp/governor" -demo >"$tmp/governor.out" 2>"$tmp/governor.log" </dev/null &
gov_pid=$!

governor_failed() {
  echo "readme-examples: $1" >&2
  tail -n 20 "$tmp/governor.log" | sed 's/^/  governor: /' >&2
  exit 1
}
# Ready when this process printed its banner (so both its listeners are
# bound: a /readyz from someone else's governor does not count) and /readyz
# answers 200.
for _ in $(seq 300); do
  kill -0 "$gov_pid" 2>/dev/null ||
    governor_failed "governor -demo exited at start (is $listen or $admin in use?)"
  if grep -q '^Governor demo' "$tmp/governor.out" &&
    "$real_curl" -fsS --max-time 2 -o /dev/null "http://$admin/readyz" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
"$real_curl" -fsS --max-time 2 -o /dev/null "http://$admin/readyz" ||
  governor_failed "governor -demo did not become ready on http://$admin/readyz within 30s"
echo "readme-examples: governor -demo ready on $listen (admin $admin); running the curl examples in $shown"

# ---- run them
readme_errors=0
if [ -s "$tmp/extract-errors" ]; then
  while IFS= read -r e; do
    readme_errors=$((readme_errors + 1))
    printf 'FAIL  %s\n' "$e"
  done <"$tmp/extract-errors"
fi
for meta in "$tmp"/blocks/*.meta; do
  [ -e "$meta" ] || continue
  id="$(basename "$meta" .meta)"
  run_block "$id"
done

if ! kill -0 "$gov_pid" 2>/dev/null; then
  governor_failed "governor exited while the examples ran"
fi

if [ "$ran" -eq 0 ]; then
  echo "readme-examples: no curl example ran (all of them are marked readme-skip)" >&2
  exit 1
fi
echo "readme-examples: $ran examples run from $shown: $passed ok, $failed failed, $skipped skipped; $readme_errors marker/block errors"
[ "$failed" -eq 0 ] && [ "$readme_errors" -eq 0 ]
