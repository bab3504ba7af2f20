#!/usr/bin/env bash
# End-to-end run on kind, for machines with a Docker engine (the stand-in without Docker is
# hack/local-cluster.sh, which test/e2e starts by itself):
#   1. create a kind cluster (or reuse the one named $CACHEQOS_KIND_CLUSTER),
#   2. build the Dockerfile's operator and cache-sidecar targets and the test images of
#      hack/images/build.sh, and load them all into the cluster's nodes,
#   3. install charts/cacheqos with those images (pull policy Never) and wait for it,
#   4. run `go test ./test/e2e/...` against the cluster, through its kubeconfig,
#   5. delete the cluster, unless it existed before or CACHEQOS_KIND_KEEP=1.
#
#   hack/kind-e2e.sh [go test flags...]       e.g. hack/kind-e2e.sh -run TestRedis -v
#
# Settings (environment):
#   CACHEQOS_KIND_CLUSTER   kind cluster name (default cacheqos-e2e)
#   CACHEQOS_KIND_NODE      node image for a new cluster (default: kind's own)
#   CACHEQOS_KIND_KEEP      1: leave the cluster running afterwards
#   CACHEQOS_VERSION        tag of the images built here (default e2e)
#
# test/e2e learns about the cluster from CACHEQOS_E2E_KUBECONFIG (the kind kubeconfig) and
# CACHEQOS_E2E_IMAGE_DIR (the image tars already loaded); a suite that does not read
# CACHEQOS_E2E_KUBECONFIG would start its own local cluster instead, so this script refuses
# to run it and says so.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cluster=${CACHEQOS_KIND_CLUSTER:-cacheqos-e2e}
version=${CACHEQOS_VERSION:-e2e}
namespace=cacheqos-system
test_images=(smoke redis memcached)

log() { printf '[kind-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'kind-e2e: %s\n' "$*" >&2; exit 1; }

helm=$(command -v helm || echo "$repo/bin/helm")
for tool in docker kind go "$helm"; do
  command -v "$tool" >/dev/null || die "$tool is not installed (helm: hack/bootstrap.sh tools; kind: go install sigs.k8s.io/kind)"
done
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed): kind needs one; without Docker use test/e2e directly (hack/local-cluster.sh)"
grep -rqs CACHEQOS_E2E_KUBECONFIG "$repo/test/e2e" ||
  die "test/e2e does not read CACHEQOS_E2E_KUBECONFIG yet, so it cannot run against kind (it would start hack/local-cluster.sh instead)"

work=$(mktemp -d)
kubeconfig=$work/kubeconfig
created=0
cleanup() {
  local status=$?
  if [ "$created" = 1 ] && [ "${CACHEQOS_KIND_KEEP:-}" != 1 ]; then
    log "deleting kind cluster $cluster"
    kind delete cluster --name "$cluster" >&2 || true
  elif [ "$created" = 1 ]; then
    log "CACHEQOS_KIND_KEEP=1: cluster $cluster stays; kind export kubeconfig --name $cluster"
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "reusing kind cluster $cluster (it stays afterwards)"
else
  log "creating kind cluster $cluster"
  kind create cluster --name "$cluster" ${CACHEQOS_KIND_NODE:+--image "$CACHEQOS_KIND_NODE"} --wait 120s >&2
  created=1
fi
kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >&2

log "building the operator and cache-sidecar images (Dockerfile)"
for target in operator cache-sidecar; do
  docker build --target "$target" --build-arg VERSION="$version" -t "localhost/cacheqos/$target:$version" "$repo" >&2
  kind load docker-image --name "$cluster" "localhost/cacheqos/$target:$version" >&2
done

log "building the test images (hack/images/build.sh ${test_images[*]})"
images=$work/images
mkdir -p "$images"
"$repo/hack/images/build.sh" -o "$images" "${test_images[@]}" >"$work/built"
while read -r _tag _id tar; do
  kind load image-archive --name "$cluster" "$tar" >&2
done <"$work/built"

log "installing charts/cacheqos"
"$helm" upgrade --install cacheqos "$repo/charts/cacheqos" --kubeconfig "$kubeconfig" \
  --namespace "$namespace" --create-namespace --wait --timeout 5m \
  --set images.operator.repository=localhost/cacheqos/operator --set images.operator.tag="$version" \
  --set images.sidecar.repository=localhost/cacheqos/cache-sidecar --set images.sidecar.tag="$version" \
  --set images.pullPolicy=Never >&2

log "running test/e2e"
cd "$repo"
CACHEQOS_E2E_KUBECONFIG=$kubeconfig CACHEQOS_E2E_IMAGE_DIR=$images KUBECONFIG=$kubeconfig \
  go test -count=1 -timeout 30m "$@" ./test/e2e/...
