# syntax=docker/dockerfile:1.7
# The cacheqos images, one target each:
#
#   docker build --target operator      -t cacheqos/operator:dev .
#   docker build --target cache-sidecar -t cacheqos/cache-sidecar:dev .
#   docker build --target loadgen       -t cacheqos/loadgen:dev .
#
# operator: the operator binary (cgo: it loads OR-Tools with dlopen at run time) and the
#   OR-Tools shared libraries from the ortools wheel, in the wheel's folder layout
#   (ortools/.libs/ next to ortools.libs/: the libraries find each other through $ORIGIN).
# cache-sidecar: the static sidecar binary at /cache-sidecar (the operator's DaemonSet copies
#   it from there into the engine container), plus redis-server and memcached from the
#   official images with exactly the libraries they load, so the image is also the default
#   engine image of both engines.
# loadgen: the static cacheqos-loadgen binary, for demos and load tests.
#
# hack/images/build.sh (recipes operator, cache-sidecar and loadgen) builds the same binaries, the same
# way, for the local cluster without Docker; test/chart checks that the two stay in step.
# Base images are pinned to exact tags and are all Debian 12 (glibc), like the local builds.

ARG VERSION=dev
ARG ORTOOLS_VERSION=9.15.6755

FROM golang:1.26.8-bookworm AS build
ARG VERSION
# Module and build caches live in BuildKit cache mounts, outside the image's layers.
ENV GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOMODCACHE=/cache/mod GOCACHE=/cache/build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/cache/mod go mod download
COPY api/ api/
COPY cache-sidecar/ cache-sidecar/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN --mount=type=cache,target=/cache/mod --mount=type=cache,target=/cache/build \
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/operator ./cmd/operator
RUN --mount=type=cache,target=/cache/mod --mount=type=cache,target=/cache/build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cache-sidecar ./cmd/cache-sidecar
RUN --mount=type=cache,target=/cache/mod --mount=type=cache,target=/cache/build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cacheqos-loadgen ./cmd/cacheqos-loadgen

# OR-Tools: the libraries of the PyPI wheel, fetched as hack/bootstrap.sh fetches them for the
# tests.
FROM python:3.11.12-slim-bookworm AS ortools
ARG ORTOOLS_VERSION
RUN python3 -m pip download --no-cache-dir --quiet --no-deps --only-binary=:all: \
        --platform "manylinux_2_28_$(uname -m)" --python-version 3.11 -d /wheel "ortools==${ORTOOLS_VERSION}" \
    && python3 -m zipfile -e /wheel/ortools-*.whl /wheel/unpacked \
    && mkdir -p /opt/ortools/ortools \
    && mv /wheel/unpacked/ortools/.libs /opt/ortools/ortools/.libs \
    && mv /wheel/unpacked/ortools.libs /opt/ortools/ortools.libs \
    && test -f /opt/ortools/ortools/.libs/libortools.so.9 \
    && rm -rf /wheel

# collect-engine.sh NAME copies the engine NAME (found on PATH) to $OUT/usr/bin/NAME (OUT
# defaults to /out) with the shared libraries it loads, except the C library's own: the final
# image has those, from the same Debian release. Library directories are resolved, because
# /lib is a symlink to usr/lib in the final image (merged /usr) and must stay one.
FROM scratch AS collect-engine
COPY --chmod=0755 <<'SCRIPT' /collect-engine.sh
#!/bin/sh
set -eu
name=$1
out=${OUT:-/out}
bin=$(command -v "$name")
mkdir -p "$out/usr/bin"
cp -L "$bin" "$out/usr/bin/$name"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)[.]so' |
  while read -r lib; do
    dir=$(readlink -f "$(dirname "$lib")")
    mkdir -p "$out$dir"
    cp -L "$lib" "$out$dir/"
  done
SCRIPT

FROM redis:7.0.15-bookworm AS redis
USER root
RUN --mount=from=collect-engine,target=/collect /collect/collect-engine.sh redis-server

FROM memcached:1.6.38-bookworm AS memcached
USER root
RUN --mount=from=collect-engine,target=/collect /collect/collect-engine.sh memcached

FROM debian:12.10-slim AS operator
COPY --from=ortools /opt/ortools/ /opt/ortools/
COPY --from=build /out/operator /operator
ENV CACHEQOS_ORTOOLS_LIB=/opt/ortools/ortools/.libs/libortools.so.9
# 65532: the conventional non-root user of minimal images; it owns nothing in the image.
USER 65532:65532
ENTRYPOINT ["/operator"]

FROM debian:12.10-slim AS cache-sidecar
COPY --from=redis /out/ /
COPY --from=memcached /out/ /
COPY --from=build /out/cache-sidecar /cache-sidecar
USER 65532:65532
ENTRYPOINT ["/cache-sidecar"]

FROM debian:12.10-slim AS loadgen
COPY --from=build /out/cacheqos-loadgen /cacheqos-loadgen
USER 65532:65532
ENTRYPOINT ["/cacheqos-loadgen"]
