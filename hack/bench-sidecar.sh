#!/usr/bin/env bash
# Benchmarks the cache sidecar's proxy against the engine it fronts and against twemproxy, in one
# run, and prints throughput and p50/p99 ratios and the CPU each target spends per request
# (see cache-sidecar/bench and docs/sidecar-performance.md); then the share of the proxy's CPU
# per request the miss-ratio curve's accounting adds (BenchmarkCurveAccounting).
#   hack/bench-sidecar.sh                       # redis and memcached
#   hack/bench-sidecar.sh -engines redis        # flags go to the driver
#   PROFILE=dir hack/bench-sidecar.sh           # also CPU-profile the sidecar and print its hot spots
#   CURVES=only hack/bench-sidecar.sh           # only the curve accounting's cost (CURVES=skip: without it)
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
curves=${CURVES:-run}
case "$curves" in
  run | only | skip) ;;
  *) echo "bench-sidecar: CURVES=$curves, want run, only or skip" >&2; exit 1 ;;
esac
if [ "$curves" != only ]; then
  "$work/bench" "${args[@]}" "$@"
fi

if [ "$curves" != skip ]; then
  echo
  echo "== curve accounting: share of the proxy's CPU per request (docs/sidecar-performance.md)"
  go test ./cache-sidecar/proxy -run '^$' -bench BenchmarkCurveAccounting -benchtime 960000x -timeout 30m |
    awk '/^BenchmarkCurveAccounting\// {
      for (i = 3; i < NF; i++) m[$(i + 1)] = $i
      split($1, name, "[/-]")
      printf "%-9s recorder (true sizes, engine bytes) %.1f%% (%.1f of %.0f ns per request); whole curve state %.1f%% (%.0f ns, stream hit ratio %.2f); end-to-end curves on/off %.3f (rounds p25-p75 %.3f-%.3f)\n",
        name[2], 100 * m["recorder-share"], m["recorder-cpu-ns/op"], m["proxy-cpu-ns/op-none"],
        100 * m["curve-share"], m["curve-cpu-ns/op"], m["stream-hit-ratio"],
        m["x-proxy-cpu"], m["x-proxy-cpu-p25"], m["x-proxy-cpu-p75"]
      next
    }
    /^(FAIL|---|panic)/ || /_test.go/ { print; failed = 1 }
    END { exit failed }'
fi

if [ -n "${PROFILE:-}" ]; then
  for profile in "$PROFILE"/*.pprof; do
    [ -e "$profile" ] || continue
    echo
    echo "== hot spots: $(basename "$profile" .pprof) (CPU profile of the sidecar)"
    go tool pprof -top -nodecount=25 "$work/cache-sidecar" "$profile" 2>/dev/null | sed -n '1,35p'
  done
fi
