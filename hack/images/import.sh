#!/usr/bin/env bash
# Imports image tars (from hack/images/build.sh or mkimage) into the containerd of every node of
# the local cluster, in the k8s.io namespace where kubelet finds them; pods use them with
# imagePullPolicy: Never.
#
#   hack/images/import.sh TAR...
#
# Honours CACHEQOS_CLUSTER_DIR like hack/local-cluster.sh.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "import.sh: $*" >&2; exit 1; }

[ $# -gt 0 ] || { echo "usage: $0 TAR..." >&2; exit 2; }
for tar in "$@"; do
  [ -f "$tar" ] || die "$tar: no such file"
done
eval "$("$repo/hack/local-cluster.sh" env)"
for address in $CACHEQOS_CLUSTER_CONTAINERD_ADDRESSES; do
  ctr --address "$address" version >/dev/null 2>&1 ||
    die "the local cluster's containerd does not answer on $address: run hack/local-cluster.sh up"
done
# import_all ADDRESS TAR...: every tar into one node's containerd.
import_all() {
  local address=$1 tar
  shift
  for tar in "$@"; do
    ctr --address "$address" --namespace k8s.io images import "$tar" >/dev/null ||
      die "importing $tar into $address failed"
  done
}
# The nodes in parallel: each unpacks the layers into its own snapshotter.
pids=()
for address in $CACHEQOS_CLUSTER_CONTAINERD_ADDRESSES; do
  import_all "$address" "$@" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
[ $failed = 0 ] || die "importing into some node failed (see above)"
echo "imported $# image(s) into $(wc -w <<<"$CACHEQOS_CLUSTER_CONTAINERD_ADDRESSES") node(s)" >&2
