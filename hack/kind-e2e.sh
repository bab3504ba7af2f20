#!/usr/bin/env bash
# The end-to-end suite on kind, for machines with a Docker engine (without Docker, test/e2e
# starts hack/local-cluster.sh by itself): hack/kind.sh brings up the cluster with every image
# loaded, then `go test ./test/e2e/...` runs against it through CACHEQOS_E2E_KUBECONFIG — the
# suite installs the monitoring stack and charts/cacheqos itself, as on the local cluster —
# and the cluster is deleted afterwards unless it existed before or CACHEQOS_KIND_KEEP=1.
#
#   hack/kind-e2e.sh [go test flags...]       e.g. hack/kind-e2e.sh -run TestProduct -v
#
# Settings (environment): CACHEQOS_KIND_CLUSTER (default cacheqos-e2e), CACHEQOS_KIND_KEEP,
# and those of hack/kind.sh.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cluster=${CACHEQOS_KIND_CLUSTER:-cacheqos-e2e}

existed=0
kind get clusters 2>/dev/null | grep -qx "$cluster" && existed=1
cleanup() {
  local status=$?
  if [ "$existed" = 0 ] && [ "${CACHEQOS_KIND_KEEP:-}" != 1 ]; then
    "$repo/hack/kind.sh" down "$cluster" || true
  fi
  exit "$status"
}
trap cleanup EXIT

kubeconfig=$("$repo/hack/kind.sh" up "$cluster")
cd "$repo"
CACHEQOS_E2E_KUBECONFIG=$kubeconfig go test -count=1 -timeout 30m "$@" ./test/e2e/...
