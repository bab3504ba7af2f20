#!/usr/bin/env bash
# Removes everything hack/monitoring/install.sh created: the Prometheus (first, while the
# operator still runs to clean up after it), namespace cacheqos-monitoring with the operator,
# the ClusterRoles and ClusterRoleBindings, and the CRDs it installed, which takes every
# ServiceMonitor, PodMonitor and PrometheusRule of the cluster with them. CRDs that were there
# before install.sh stay. Idempotent.
#
#   hack/monitoring/uninstall.sh [--kubeconfig FILE] [--timeout SECONDS]   (default 300 s)
set -euo pipefail
source "$(dirname "$0")/common.sh"

start=$SECONDS
if [ -n "$(kc get crd prometheuses.monitoring.coreos.com --ignore-not-found -o name)" ]; then
  log "Prometheus"
  kc -n "$namespace" delete prometheus "$prometheus_name" --ignore-not-found --wait --timeout "$(remaining)s" >&2
fi
log "namespace $namespace"
kc delete namespace "$namespace" --ignore-not-found --wait --timeout "$(remaining)s" >&2
log "cluster roles and CRDs labelled $part_of_label"
kc delete clusterrolebinding,clusterrole -l "$part_of_label" --ignore-not-found --wait --timeout "$(remaining)s" >&2
kc delete crd -l "$part_of_label" --ignore-not-found --wait --timeout "$(remaining)s" >&2
log "removed in $((SECONDS - start))s"
