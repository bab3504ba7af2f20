#!/usr/bin/env bash
# Runs the test layers (all, or the ones named) and prints each layer's counts.
#   hack/test.sh                  # static checks, then unit envtest integration e2e
#   hack/test.sh unit integration
# Runs every layer even after a failure, then exits non-zero when anything failed or when no
# test ran at all.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

declare -A layer_pkgs=(
  [unit]="./internal/... ./cmd/... ./hack/..."
  [envtest]="./api/... ./controllers/... ./test/chart/..."
  [integration]="./cache-sidecar/... ./test/integration/..."
  [e2e]="./test/e2e/..."
)
layers=("$@")
[ ${#layers[@]} -gt 0 ] || layers=(static unit envtest integration e2e)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/testreport" ./hack/testreport
touch "$work/counts"
failed=0

for layer in "${layers[@]}"; do
  if [ "$layer" = static ]; then
    echo "== static: gofmt, go vet, golangci-lint, tracked file sizes"
    go run ./hack/sizecheck || failed=1
    unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
    [ -z "$unformatted" ] || { echo "not gofmt'ed: $unformatted"; failed=1; }
    go vet ./... || failed=1
    "$repo/bin/golangci-lint" run --timeout 10m ./... || failed=1
    continue
  fi
  [ -n "${layer_pkgs[$layer]:-}" ] || { echo "unknown layer '$layer'" >&2; exit 2; }
  # Patterns of folders that do not exist yet would make go list fail as a whole.
  patterns=()
  for p in ${layer_pkgs[$layer]}; do
    [ -d "${p%/...}" ] && patterns+=("$p")
  done
  pkgs=
  [ ${#patterns[@]} -eq 0 ] || pkgs=$(go list "${patterns[@]}")
  echo "== $layer: $(printf '%s' "$pkgs" | grep -c . || true) packages"
  [ -n "$pkgs" ] || continue
  # shellcheck disable=SC2086
  go test ${GO_TEST_FLAGS:--count=1 -timeout 20m} -json $pkgs 2>&1 |
    "$work/testreport" -layer "$layer" -counts "$work/counts" || failed=1
done

"$work/testreport" -total "$work/counts" || failed=1
exit $failed
