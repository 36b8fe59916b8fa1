#!/usr/bin/env bash
# Governor's test command (README): static checks, then every test under
# the race detector. Runs from any directory.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -count=1 -timeout 10m ./...
