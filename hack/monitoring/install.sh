#!/usr/bin/env bash
# Installs the monitoring stack of the local cluster (or any cluster whose nodes have the
# images): the prometheus-operator CRDs, the operator, and one Prometheus in namespace
# cacheqos-monitoring that scrapes every ServiceMonitor and PodMonitor and evaluates every
# PrometheusRule of the cluster, behind the Service "prometheus". Idempotent (server-side
# apply); waits until Prometheus answers /-/ready, then prints its URL on stdout.
#
#   hack/monitoring/install.sh [--kubeconfig FILE] [--timeout SECONDS]   (default 300 s)
#
# Needs `hack/bootstrap.sh monitoring` (the CRD manifests of the pinned release, in
# bin/monitoring/crds) and the images prometheus-operator, prometheus-config-reloader and
# prometheus of hack/images/build.sh imported into the cluster (hack/images/import.sh).
#
# The URL printed uses the Service's DNS name when the cluster runs DNS (kube-system/kube-dns)
# and its cluster IP otherwise: the local cluster has no DNS, and a cluster IP is reachable
# from pods and from the local cluster's node alike.
#
# CRDs of these kinds that exist already and were not installed by this script are left as
# they are (and uninstall.sh leaves them too); ours carry app.kubernetes.io/part-of.
# hack/monitoring/uninstall.sh removes everything this creates.
set -euo pipefail
source "$(dirname "$0")/common.sh"

crd_dir=$repo/bin/monitoring/crds
for name in "${crd_names[@]}"; do
  [ -f "$crd_dir/monitoring.coreos.com_$name.yaml" ] ||
    die "$crd_dir/monitoring.coreos.com_$name.yaml is missing: run hack/bootstrap.sh monitoring"
done

apply() { kc apply --server-side --force-conflicts --field-manager "$field_manager" "$@" >/dev/null; }

# On failure, show what a human would look at first.
on_exit() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    log "failed; the namespace's pods and events:"
    kc -n "$namespace" get pods -o wide >&2 || true
    kc -n "$namespace" get events --sort-by .lastTimestamp >&2 || true
  fi
}
trap on_exit EXIT

start=$SECONDS
log "CRDs (prometheus-operator $PROMETHEUS_OPERATOR_VERSION): ${crd_names[*]}"
ours=()
for name in "${crd_names[@]}"; do
  crd=$name.monitoring.coreos.com
  # "NAME/LABEL" when the CRD exists, empty when it does not.
  found=$(kc get crd "$crd" --ignore-not-found -o jsonpath='{.metadata.name}/{.metadata.labels.app\.kubernetes\.io/part-of}')
  if [ -n "$found" ] && [ "$found" != "$crd/$namespace" ]; then
    log "keeping CRD $crd: it exists and was not installed by this script"
    continue
  fi
  # The label goes in with the same apply, so no CRD of ours is ever left without it.
  sed "/^metadata:\$/a\\  labels:\\n    ${part_of_label%%=*}: ${part_of_label#*=}" "$crd_dir/monitoring.coreos.com_$name.yaml" |
    apply -f -
  ours+=("crd/$crd")
done
[ ${#ours[@]} -eq 0 ] ||
  kc wait --for condition=Established --timeout "$(remaining)s" "${ours[@]}" >/dev/null

log "operator"
apply -f "$monitoring_dir/operator.yaml"
kc -n "$namespace" rollout status deployment/prometheus-operator --timeout "$(remaining)s" >&2

log "Prometheus $PROMETHEUS_VERSION"
sed "s/@PROMETHEUS_VERSION@/$PROMETHEUS_VERSION/" "$monitoring_dir/prometheus.yaml" | apply -f -
# The operator creates the StatefulSet a moment after the Prometheus object.
until kc -n "$namespace" get statefulset "$prometheus_statefulset" >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || die "the operator made no StatefulSet $prometheus_statefulset within ${timeout}s"
  sleep 1
done
kc -n "$namespace" rollout status statefulset "$prometheus_statefulset" --timeout "$(remaining)s" >&2

# Through the API server's Service proxy, which works wherever kubectl does (also on kind).
ready_path=/api/v1/namespaces/$namespace/services/$prometheus_service:web/proxy/-/ready
until kc get --raw "$ready_path" --request-timeout 5s >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || die "Prometheus did not answer /-/ready within ${timeout}s"
  sleep 1
done

if kc -n kube-system get service kube-dns >/dev/null 2>&1; then
  url=http://$prometheus_service.$namespace.svc:$prometheus_port
else
  ip=$(kc -n "$namespace" get service "$prometheus_service" -o jsonpath='{.spec.clusterIP}')
  url=http://$ip:$prometheus_port
fi
log "Prometheus is ready at $url after $((SECONDS - start))s"
echo "$url"
