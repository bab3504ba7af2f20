#!/usr/bin/env bash
# Imports image tars (from hack/images/build.sh or mkimage) into the local cluster's containerd,
# in the k8s.io namespace where kubelet finds them; pods use them with imagePullPolicy: Never.
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
ctr --address "$CONTAINERD_ADDRESS" version >/dev/null 2>&1 ||
  die "the local cluster's containerd does not answer on $CONTAINERD_ADDRESS: run hack/local-cluster.sh up"
for tar in "$@"; do
  ctr --address "$CONTAINERD_ADDRESS" --namespace k8s.io images import "$tar" >&2 ||
    die "importing $tar failed"
done
