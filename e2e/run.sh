#!/usr/bin/env bash
# Governor's end-to-end suite: the official OpenAI and Anthropic Node SDKs
# against real governor and mockllm processes. Runs from any directory; needs
# Go and Node.js 20+ with npm on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"

for tool in go node npm; do
  command -v "$tool" >/dev/null || { echo "e2e: $tool not found on PATH" >&2; exit 1; }
done
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "e2e: Node.js 20 or newer is required (found $(node --version))" >&2
  exit 1
fi

bin="$(mktemp -d "${TMPDIR:-/tmp}/governor-e2e.XXXXXX")"
trap 'rm -rf "$bin"' EXIT

echo "e2e: npm ci"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

echo "e2e: go build governor, mockllm"
(cd "$root" && go build -o "$bin/governor" ./cmd/governor && go build -o "$bin/mockllm" ./cmd/mockllm)
export GOVERNOR_BIN="$bin/governor" MOCKLLM_BIN="$bin/mockllm"

cd "$here"
node --test --test-timeout=90000 ./*.test.mjs
