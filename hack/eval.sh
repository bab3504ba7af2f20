#!/usr/bin/env bash
# Regenerates docs/evaluation.md and its plots in docs/eval/ by running every built-in scenario
# of cacheqos-sim under every policy, then 40 random fleets (see cmd/cacheqos-sim).
#   hack/eval.sh                       # seed 1, the committed report
#   hack/eval.sh -seed 7               # flags go to "cacheqos-sim eval"
#   hack/eval.sh -scenarios softqos    # only some scenarios
#   hack/eval.sh -fuzz-n 50            # more random fleets in the report
#   hack/eval.sh -fuzz-only -n 50      # only the random fleets, printed, docs untouched:
#                                      # flags go to "cacheqos-sim fuzz" (make eval-fuzz)
# The optimal policy needs OR-Tools: CACHEQOS_ORTOOLS_LIB (the Makefile exports it after
# make bootstrap); without it the simulator warns and uses the greedy plan.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

if [ -z "${CACHEQOS_ORTOOLS_LIB:-}" ] || [ ! -e "$CACHEQOS_ORTOOLS_LIB" ]; then
  echo "eval: CACHEQOS_ORTOOLS_LIB is not set to an existing OR-Tools library (run make bootstrap, then make eval)" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/cacheqos-sim" ./cmd/cacheqos-sim

start=$(date +%s)
if [ "${1:-}" = "-fuzz-only" ]; then
  shift
  "$work/cacheqos-sim" fuzz -seed 1 "$@"
  echo "eval: $(( $(date +%s) - start ))s"
  exit 0
fi

# A full run replaces every plot, so plots of renamed scenarios do not linger.
if [ "$#" -eq 0 ]; then
  rm -f docs/eval/*.png
fi
"$work/cacheqos-sim" eval -out docs/evaluation.md -plots docs/eval "$@"
echo "eval: $(( $(date +%s) - start ))s"
