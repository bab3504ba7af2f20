#!/usr/bin/env bash
# `make demo`: a cache fleet shared by three tenants converging to their SLOs, on a real
# cluster — kind when Docker is available, otherwise the local cluster of
# hack/local-cluster.sh (which needs root).
#
#   hack/demo.sh          bring up the cluster, install the monitoring stack and the chart,
#                         apply hack/demo/tenants.yaml (a CacheCluster; a strict hit-ratio, a
#                         strict latency and a best-effort tenant) and hack/demo/load.yaml
#                         (cacheqos-loadgen per tenant), then watch them converge: a live
#                         table of `kubectl get tenantslo -A`, and at the end a PNG chart of
#                         each tenant's hit ratio vs target over time, and a summary
#   hack/demo.sh down     remove the demo and its cluster
#
# Settings (environment):
#   CACHEQOS_DEMO_MINUTES  how long to watch at most (default 8); the watch ends earlier once
#                          every SLO has held for a minute
#   CACHEQOS_DEMO_OUT      where the chart and the CSV go (default _demo in the repository)
#   CACHEQOS_DEMO_CLUSTER  kind or local (default: kind when docker and kind work, else local)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
minutes=${CACHEQOS_DEMO_MINUTES:-8}
out=${CACHEQOS_DEMO_OUT:-$repo/_demo}
kind_name=cacheqos-demo
kubectl=$repo/bin/kube/kubectl
helm=$repo/bin/helm

log() { printf '\n\033[1m[demo %s] %s\033[0m\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

platform() {
  if [ -n "${CACHEQOS_DEMO_CLUSTER:-}" ]; then
    echo "$CACHEQOS_DEMO_CLUSTER"
  elif command -v docker >/dev/null && command -v kind >/dev/null && docker info >/dev/null 2>&1; then
    echo kind
  else
    echo local
  fi
}

# cluster_up prints the kubeconfig of a cluster with every image the demo runs.
cluster_up() {
  case $(platform) in
    kind)
      log "kind cluster $kind_name with locally built images (hack/kind.sh)"
      "$repo/hack/kind.sh" up "$kind_name"
      ;;
    local)
      [ "$(id -u)" = 0 ] || die "without Docker the demo runs the local cluster, which needs root (it sets up a bridge, iptables and kubelet)"
      local images=$HOME/.cache/cacheqos/demo-images
      log "images (hack/images/build.sh), then the local cluster (hack/local-cluster.sh up)"
      mkdir -p "$images"
      "$repo/hack/images/build.sh" -o "$images" operator cache-sidecar loadgen \
        prometheus-operator prometheus-config-reloader prometheus >"$images/built"
      "$repo/hack/local-cluster.sh" up >&2
      "$repo/hack/images/import.sh" "$images"/{operator,cache-sidecar,loadgen,prometheus-operator,prometheus-config-reloader,prometheus}.tar
      "$repo/hack/local-cluster.sh" kubeconfig
      ;;
    *) die "CACHEQOS_DEMO_CLUSTER must be kind or local" ;;
  esac
}

up() {
  local kubeconfig prometheus ip
  kubeconfig=$(cluster_up)
  export KUBECONFIG=$kubeconfig

  log "monitoring: prometheus-operator and a Prometheus (hack/monitoring/install.sh)"
  prometheus=$("$repo/hack/monitoring/install.sh" --kubeconfig "$kubeconfig")

  log "cacheqos: helm upgrade --install cacheqos charts/cacheqos"
  # The local images keep their tag from build to build; their ID in the pod template rolls the
  # operator onto a rebuilt image when the demo runs again.
  local operator_id
  operator_id=$(awk '$1 ~ /\/operator:/ { print $2 }' "$HOME/.cache/cacheqos/demo-images/built" 2>/dev/null || true)
  "$helm" upgrade --install cacheqos "$repo/charts/cacheqos" --namespace cacheqos-system --create-namespace \
    --wait --timeout 3m --values "$repo/hack/demo/values.yaml" --set operator.prometheusURL="$prometheus" \
    ${operator_id:+--set-string "operator.podAnnotations.cacheqos\.io/image-id=$operator_id"} >/dev/null

  log "the fleet and its tenants (hack/demo/tenants.yaml)"
  "$kubectl" apply -f "$repo/hack/demo/tenants.yaml"
  "$kubectl" -n cacheqos-demo wait cachecluster/demo --for=condition=Ready --timeout=3m
  for t in demo-shop/catalog demo-search/queries demo-analytics/reports; do
    "$kubectl" -n "${t%/*}" wait "tenantslo/${t#*/}" --for=condition=Ready --timeout=2m
  done

  log "load: one cacheqos-loadgen per tenant (hack/demo/load.yaml)"
  ip=$("$kubectl" -n cacheqos-demo get service demo -o jsonpath='{.spec.clusterIP}')
  sed "s/CLIENT_SERVICE_IP/$ip/" "$repo/hack/demo/load.yaml" | "$kubectl" apply -f -

  log "watching the tenants converge (at most $minutes minutes; Ctrl-C stops watching, the demo keeps running)"
  mkdir -p "$out"
  (cd "$repo" && go run ./hack/demo/watch --kubeconfig "$kubeconfig" --kubectl "$kubectl" \
    --minutes "$minutes" --out "$out") || true

  cat >&2 <<MSG

The demo keeps running. Look around:
  export KUBECONFIG=$kubeconfig
  $kubectl get tenantslo -A              # allocation, observed vs target, conditions
  $kubectl get cachecluster,cachenodeplan -A
  $kubectl -n demo-shop logs deploy/loadgen --tail=5
Remove it all:
  make demo-down        (hack/demo.sh down)
MSG
}

down() {
  case $(platform) in
    kind) "$repo/hack/kind.sh" down "$kind_name" ;;
    local) "$repo/hack/local-cluster.sh" purge ;;
  esac
  log "demo removed (results stay in $out)"
}

case ${1:-up} in
  up | down) "${1:-up}" ;;
  *) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac
