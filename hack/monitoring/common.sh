# Shared by hack/monitoring/install.sh and uninstall.sh (sourced, not run): their settings,
# command line and kubectl.
#
#   [--kubeconfig FILE] [--timeout SECONDS]
#
# The kubeconfig defaults to $KUBECONFIG, else the local cluster's (hack/local-cluster.sh).
# kubectl is bin/kube/kubectl from `hack/bootstrap.sh kube`, else the one on PATH.

monitoring_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$monitoring_dir/../.." && pwd)
# shellcheck source=hack/versions.env
source "$repo/hack/versions.env"

namespace=cacheqos-monitoring
# Every object the stack consists of carries this label; uninstall.sh deletes by it.
part_of_label=app.kubernetes.io/part-of=cacheqos-monitoring
field_manager=cacheqos-monitoring
# The Prometheus object, the StatefulSet the operator makes of it, and the Service in front.
prometheus_name=prometheus
prometheus_statefulset=prometheus-$prometheus_name
prometheus_service=prometheus
prometheus_port=9090
# The monitoring.coreos.com kinds installed: what a Prometheus and its selectors need.
crd_names=(prometheuses servicemonitors podmonitors probes prometheusrules)

script_name=$(basename "$0")
log() { printf '[%s %s] %s\n' "${script_name%.sh}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '%s: %s\n' "$script_name" "$*" >&2; exit 1; }

kubeconfig=${KUBECONFIG:-}
timeout=300
while [ $# -gt 0 ]; do
  case $1 in
    --kubeconfig) [ $# -ge 2 ] || die "--kubeconfig needs a file"; kubeconfig=$2; shift 2 ;;
    --kubeconfig=*) kubeconfig=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a number of seconds"; timeout=$2; shift 2 ;;
    --timeout=*) timeout=${1#*=}; shift ;;
    *) echo "usage: $0 [--kubeconfig FILE] [--timeout SECONDS]" >&2; exit 2 ;;
  esac
done
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout '$timeout' is not a positive number of seconds"
[ -n "$kubeconfig" ] || kubeconfig=$("$repo/hack/local-cluster.sh" kubeconfig)
[ -f "$kubeconfig" ] || die "kubeconfig $kubeconfig does not exist (is the cluster up? hack/local-cluster.sh up)"

if [ -x "$repo/bin/kube/kubectl" ]; then
  kubectl_bin=$repo/bin/kube/kubectl
else
  kubectl_bin=$(command -v kubectl) || die "no kubectl: run hack/bootstrap.sh kube"
fi
kc() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }

# One deadline for the whole run; remaining prints the seconds left, at least 1.
deadline=$((SECONDS + timeout))
remaining() {
  local left=$((deadline - SECONDS))
  [ "$left" -gt 0 ] || left=1
  echo "$left"
}
