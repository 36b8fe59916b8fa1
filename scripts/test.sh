#!/usr/bin/env bash
# Governor's test command (README): static checks, every Go test under the
# race detector, the end-to-end suite with the official SDKs, README's curl
# examples against the demo, and the Kubernetes manifests. Runs from any
# directory; needs Go, curl, and Node.js 20+ with npm.
set -euo pipefail
cd "$(dirname "$0")/.."

# README's examples run `governor -demo` on README's own addresses, last:
# check now, not after the Go tests, that nothing else listens there (a demo
# left running from README's first command, say).
busy=0
for addr in 127.0.0.1:8080 127.0.0.1:9090; do
  if (: <"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
    who=""
    if command -v ss >/dev/null; then
      who=$(ss -Hltnp "sport = :${addr##*:}" 2>/dev/null | grep -o 'users:(([^)]*))' | head -n1 || true)
    fi
    echo "test.sh: $addr is in use${who:+ by $who}; README's examples need it: stop that process (a governor -demo?) and run again" >&2
    busy=1
  fi
done
[ "$busy" -eq 0 ] || exit 1

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
go tool staticcheck ./...
go test -race -count=1 -timeout 10m ./...

# The official OpenAI and Anthropic Node SDKs against real processes.
e2e/run.sh

# Every curl example in README, verbatim, against `governor -demo`.
scripts/readme-examples.sh

# The Kubernetes manifests: rendered with kustomize, decoded strictly.
deploy/test.sh
