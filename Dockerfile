# syntax=docker/dockerfile:1
# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What `governor -version` reports: docker build --build-arg VERSION=v1.2.3
# (.dockerignore keeps .git out of the context, so Go cannot stamp it).
ARG VERSION=dev
# Keep this line identical to the build step in .ci/run, which CI runs.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o "${TMPDIR:-/tmp}/governor-ci/governor" ./cmd/governor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /tmp/governor-ci/governor /governor
USER nonroot:nonroot
# In a container the main listener must be reachable from the app container
# of the same pod only; loopback is shared inside a pod.
ENV GOVERNOR_LISTEN=127.0.0.1:8080 GOVERNOR_ADMIN_LISTEN=:9090
EXPOSE 9090
ENTRYPOINT ["/governor"]
