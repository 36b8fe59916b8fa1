#!/usr/bin/env bash
# Governor's test command (README): static checks, every Go test under the
# race detector, the end-to-end suite with the official SDKs, README's curl
# examples against the demo, and the Kubernetes manifests. Runs from any
# directory; needs Go, curl, and Node.js 20+ with npm.
set -euo pipefail
cd "$(dirname "$0")/.."

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
