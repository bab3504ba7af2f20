#!/usr/bin/env bash
# A kind cluster that runs what the local cluster runs, for machines with a Docker engine
# (without Docker, hack/local-cluster.sh is the stand-in):
#
#   hack/kind.sh up [NAME]          create the cluster (or reuse it), build the images and load
#                                   them, route its pod and Service ranges to this host;
#                                   prints the kubeconfig path
#   hack/kind.sh down [NAME]        delete the cluster and the routes
#
# The cluster has three nodes, as the end-to-end suite needs: a control plane that also runs
# pods (its NoSchedule taint is removed) and two workers.
#
# Images: the Dockerfile's operator, cache-sidecar and loadgen targets, and the other images
# of hack/images/build.sh (test servers, the monitoring stack), all under the tags the suite
# and the demo use (localhost/cacheqos/NAME:local). The routes let this host reach pods and
# Services as it does on the local cluster (Linux Docker only; needs root).
#
# Settings (environment): CACHEQOS_KIND_NODE node image for a new cluster (default: kind's
# own); CACHEQOS_VERSION version stamped into the Dockerfile images (default local).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
version=${CACHEQOS_VERSION:-local}
dockerfile_images=(operator cache-sidecar loadgen)
other_images=(smoke redis memcached prometheus-operator prometheus-config-reloader prometheus)
# kind's default pod and Service ranges.
ranges=(10.244.0.0/16 10.96.0.0/12)

log() { printf '[kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'kind.sh: %s\n' "$*" >&2; exit 1; }

check_tools() {
  for tool in docker kind go; do
    command -v "$tool" >/dev/null || die "$tool is not installed (kind: go install sigs.k8s.io/kind)"
  done
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed): kind needs one; without Docker use hack/local-cluster.sh"
}

up() {
  local cluster=$1 kubeconfig work node_ip
  check_tools
  if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
    log "reusing kind cluster $cluster"
  else
    log "creating kind cluster $cluster (three nodes)"
    work=$(mktemp -d)
    printf '%s\n' 'kind: Cluster' 'apiVersion: kind.x-k8s.io/v1alpha4' 'nodes:' \
      '- role: control-plane' '- role: worker' '- role: worker' >"$work/config.yaml"
    kind create cluster --name "$cluster" --config "$work/config.yaml" ${CACHEQOS_KIND_NODE:+--image "$CACHEQOS_KIND_NODE"} --wait 120s >&2
    rm -rf "$work"
  fi
  kubeconfig=$HOME/.cache/cacheqos/kind-$cluster.kubeconfig
  mkdir -p "$(dirname "$kubeconfig")"
  kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >&2
  # Sidecars and test pods run on every node, the control plane's included.
  "$repo/bin/kube/kubectl" --kubeconfig "$kubeconfig" taint nodes "$cluster-control-plane" \
    node-role.kubernetes.io/control-plane:NoSchedule- >&2 2>/dev/null || true

  log "building the ${dockerfile_images[*]} images (Dockerfile)"
  for target in "${dockerfile_images[@]}"; do
    docker build --target "$target" --build-arg VERSION="$version" -t "localhost/cacheqos/$target:local" "$repo" >&2
    kind load docker-image --name "$cluster" "localhost/cacheqos/$target:local" >&2
  done
  log "building the other images (hack/images/build.sh ${other_images[*]})"
  work=$(mktemp -d)
  "$repo/hack/images/build.sh" -o "$work" "${other_images[@]}" >"$work/built"
  while read -r _tag _id tar; do
    kind load image-archive --name "$cluster" "$tar" >&2
  done <"$work/built"
  rm -rf "$work"

  # The control plane forwards to the workers' pod ranges (kindnet's routes).
  node_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$cluster-control-plane")
  for cidr in "${ranges[@]}"; do
    ip route replace "$cidr" via "$node_ip" || die "cannot route $cidr to the kind node $node_ip (needs root)"
  done
  echo "$kubeconfig"
}

down() {
  local cluster=$1
  for cidr in "${ranges[@]}"; do
    ip route del "$cidr" 2>/dev/null || true
  done
  kind delete cluster --name "$cluster" >&2
  rm -f "$HOME/.cache/cacheqos/kind-$cluster.kubeconfig"
}

case ${1:-} in
  up | down) "$1" "${2:-cacheqos}" ;;
  *) echo "usage: $0 up|down [NAME]" >&2; exit 2 ;;
esac
