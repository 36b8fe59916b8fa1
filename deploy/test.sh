#!/usr/bin/env bash
# Tests of the Kubernetes manifests: every kustomization under deploy/ is
# rendered, decoded strictly into the Kubernetes API types and checked (see
# doc.go). deploy/ is a Go module of its own, which keeps the Kubernetes
# dependencies out of Governor's module; so the repository's `go test ./...`
# does not reach it and this script runs it. Runs from any directory. When
# kubectl is on PATH, the tests also check that `kubectl kustomize` renders
# the same documents.
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
go test -race -count=1 ./...
