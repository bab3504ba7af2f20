#!/usr/bin/env bash
# Benchmarks the cache sidecar's proxy against the engine it fronts and against twemproxy, in one
# run, and prints throughput and p50/p99 ratios and the CPU each target spends per request
# (see cache-sidecar/bench and docs/sidecar-performance.md).
#   hack/bench-sidecar.sh                       # redis and memcached
#   hack/bench-sidecar.sh -engines redis        # flags go to the driver
#   PROFILE=dir hack/bench-sidecar.sh           # also CPU-profile the sidecar and print its hot spots
# Needs redis-server, redis-benchmark, memcached and nutcracker (hack/bootstrap.sh installs them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

for tool in redis-server redis-benchmark memcached nutcracker; do
  command -v "$tool" >/dev/null || { echo "bench-sidecar: $tool is not installed (run make bootstrap)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/cache-sidecar" ./cmd/cache-sidecar
go build -o "$work/bench" ./cache-sidecar/bench

args=(-sidecar "$work/cache-sidecar")
if [ -n "${PROFILE:-}" ]; then
  mkdir -p "$PROFILE"
  args+=(-profile "$PROFILE")
fi
"$work/bench" "${args[@]}" "$@"

if [ -n "${PROFILE:-}" ]; then
  for profile in "$PROFILE"/*.pprof; do
    [ -e "$profile" ] || continue
    echo
    echo "== hot spots: $(basename "$profile" .pprof) (CPU profile of the sidecar)"
    go tool pprof -top -nodecount=25 "$work/cache-sidecar" "$profile" 2>/dev/null | sed -n '1,35p'
  done
fi
