#!/usr/bin/env bash
# Installs everything the build, tests, demo and benchmarks need on a fresh Debian machine.
# Idempotent: every step checks its cache entry first, so a warm run takes seconds.
#
#   hack/bootstrap.sh            # all steps
#   hack/bootstrap.sh apt tools  # only these steps
#
# Built artefacts live under $CACHEQOS_CACHE (default $HOME/.cache/cacheqos), one folder per
# tool and version; ./bin holds symlinks to the entries this checkout uses.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$repo/hack/versions.env"
cache=${CACHEQOS_CACHE:-$HOME/.cache/cacheqos}
bin="$repo/bin"
mkdir -p "$cache" "$bin"

log() { printf '[bootstrap %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian packages: cache engines, the twemproxy benchmark peer, Prometheus for integration
# tests, protoc, and the container runtime pieces the local cluster runs on.
apt_packages=(
  redis-server redis-tools memcached libmemcached-tools prometheus nutcracker
  protobuf-compiler
  containerd runc containernetworking-plugins iptables conntrack socat iproute2 busybox-static openssl
  python3-matplotlib
)

step_apt() {
  local missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "apt: all ${#apt_packages[@]} packages present"
    return
  fi
  log "apt: installing ${missing[*]}"
  as_root apt-get update -qq
  # The distribution's init scripts would start redis/memcached/prometheus/containerd as
  # services; tests start their own processes on their own ports, so keep the services off.
  local policy=/usr/sbin/policy-rc.d created_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    created_policy=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$created_policy" ] || as_root rm -f "$policy"
}

step_gomod() {
  log "go: downloading modules of $(go list -m)"
  (cd "$repo" && go mod download)
}

# hash_of FILE... -> short content hash, so a changed pin gets a new cache folder.
hash_of() { cat "$@" | sha256sum | cut -c1-12; }

# build_module NAME DIR OUTDIR LDFLAGS PKG... : builds commands of a pinned wrapper module into
# OUTDIR atomically (a killed build leaves no half-filled cache entry).
build_module() {
  local name=$1 dir=$2 out=$3 ldflags=$4
  shift 4
  if [ -d "$out" ]; then
    log "$name: cached at $out"
    return
  fi
  log "$name: building $* (cold: several minutes on 2 cores)"
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp"
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" "$@")
  mv "$out.tmp" "$out"
}

kube_dir() { echo "$cache/kube-$KUBE_VERSION-$(hash_of "$repo"/hack/modules/kube/go.{mod,sum})"; }
etcd_dir() { echo "$cache/etcd-$ETCD_VERSION-$(hash_of "$repo"/hack/modules/etcd/go.{mod,sum})"; }

step_kube() {
  local minor ld=-s\ -w
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=2025-01-01T00:00:00Z"
  done
  build_module kube "$repo/hack/modules/kube" "$(kube_dir)" "$ld" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl
  ln -sfn "$(kube_dir)" "$bin/kube"
}

step_etcd() {
  build_module etcd "$repo/hack/modules/etcd" "$(etcd_dir)" "-s -w" go.etcd.io/etcd/server/v3
  # go names the binary after the path without its major version: "server".
  [ -e "$(etcd_dir)/etcd" ] || mv "$(etcd_dir)/server" "$(etcd_dir)/etcd"
  ln -sfn "$(etcd_dir)" "$bin/etcd"
}

# envtest wants kube-apiserver, etcd and kubectl in one folder (KUBEBUILDER_ASSETS).
step_envtest() {
  mkdir -p "$bin/envtest"
  ln -sfn "$(kube_dir)/kube-apiserver" "$bin/envtest/kube-apiserver"
  ln -sfn "$(kube_dir)/kubectl" "$bin/envtest/kubectl"
  ln -sfn "$(etcd_dir)/etcd" "$bin/envtest/etcd"
  log "envtest: assets in $bin/envtest"
}

# go_tool NAME VERSION PACKAGE [LDFLAGS [VARIANT]]; VARIANT names builds with other LDFLAGS
# apart in the cache.
go_tool() {
  local name=$1 version=$2 pkg=$3 ldflags=${4:-} variant=${5:-}
  local dest="$cache/tools/$name-$version$variant"
  if [ ! -x "$dest/$name" ]; then
    log "tools: go install $pkg@$version"
    rm -rf "$dest.tmp"
    mkdir -p "$dest.tmp"
    GOBIN="$dest.tmp" CGO_ENABLED=0 go install -ldflags "$ldflags" "$pkg@$version"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
  fi
  ln -sfn "$dest/$name" "$bin/$name"
}

step_tools() {
  go_tool controller-gen "$CONTROLLER_GEN_VERSION" sigs.k8s.io/controller-tools/cmd/controller-gen
  go_tool kustomize "$KUSTOMIZE_VERSION" sigs.k8s.io/kustomize/kustomize/v5
  # Helm's release builds stamp the Kubernetes version of their client libraries (1.32 for
  # v3.17); without it helm reports 1.20 to charts and refuses ours (kubeVersion >= 1.29).
  local helm_pkg=helm.sh/helm/v3/pkg
  go_tool helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
    "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
     -X $helm_pkg/chartutil.k8sVersionMajor=1 -X $helm_pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR \
     -X $helm_pkg/lint/rules.k8sVersionMajor=1 -X $helm_pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR" \
    "-k8s1.$HELM_K8S_MINOR"
  go_tool golangci-lint "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  go_tool protoc-gen-go "$PROTOC_GEN_GO_VERSION" google.golang.org/protobuf/cmd/protoc-gen-go
  log "tools: controller-gen kustomize helm golangci-lint protoc-gen-go in $bin"
}

# OR-Tools ships no Go package; its PyPI wheel carries libortools.so.9 with the C API CP-SAT's
# own Go wrapper uses. Keep the wheel's layout: the library finds its ~100 neighbours through
# $ORIGIN-relative rpaths into ortools/.libs and ortools.libs/.
step_ortools() {
  local dest="$cache/ortools-$ORTOOLS_VERSION"
  if [ ! -e "$dest/ortools/.libs/libortools.so.9" ]; then
    log "ortools: fetching the ortools==$ORTOOLS_VERSION wheel"
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --python-version 3.11 -d "$tmp" "ortools==$ORTOOLS_VERSION"
    rm -rf "$dest.tmp"
    mkdir -p "$dest.tmp"
    python3 -m zipfile -e "$tmp"/ortools-*.whl "$dest.tmp"
    rm -rf "$tmp" "$dest"
    mv "$dest.tmp" "$dest"
  fi
  ln -sfn "$dest" "$bin/ortools"
  log "ortools: $bin/ortools/ortools/.libs/libortools.so.9"
}

# redis-py and pymemcache for the python3 on PATH (Debian's python3-redis reaches only Debian's
# python3): the proxy's transaction test and the sidecar's TLS tests drive them as applications do.
step_python() {
  if ! python3 -c "import redis, sys; sys.exit(redis.__version__ != '$REDIS_PY_VERSION')" 2>/dev/null; then
    log "python: installing redis==$REDIS_PY_VERSION"
    python3 -m pip install --quiet --disable-pip-version-check "redis==$REDIS_PY_VERSION"
  fi
  if ! python3 -c "import pymemcache, sys; sys.exit(pymemcache.__version__ != '$PYMEMCACHE_VERSION')" 2>/dev/null; then
    log "python: installing pymemcache==$PYMEMCACHE_VERSION"
    python3 -m pip install --quiet --disable-pip-version-check "pymemcache==$PYMEMCACHE_VERSION"
  fi
  log "python: redis-py $REDIS_PY_VERSION, pymemcache $PYMEMCACHE_VERSION"
}

# The local cluster's monitoring stack (hack/monitoring): prometheus-operator with its config
# reloader and CRD manifests, and a Prometheus with Kubernetes service discovery (Debian's has
# none). bin/monitoring links what hack/images/build.sh packs and hack/monitoring/install.sh
# applies, all from one pinned release, so the CRDs always match the operator.
prometheus_operator_dir() {
  echo "$cache/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION-$(hash_of "$repo"/hack/modules/prometheus-operator/go.{mod,sum})"
}
prometheus_dir() { echo "$cache/prometheus-$PROMETHEUS_VERSION-$(hash_of "$repo"/hack/modules/prometheus/go.{mod,sum})"; }

# require_pin MODULE_DIR MODULE VERSION: a wrapper module must require exactly the pinned version.
require_pin() {
  grep -Eq "^[[:space:]]*(require )?$2 $3( |\$)" "$1/go.mod" ||
    { echo "bootstrap: $1/go.mod does not require $2 $3 (hack/versions.env): update the module" >&2; exit 1; }
}

step_monitoring() {
  local po=$repo/hack/modules/prometheus-operator prom=$repo/hack/modules/prometheus
  local common=github.com/prometheus/common/version module=github.com/prometheus-operator/prometheus-operator
  # Prometheus tags its Go module v0.<100*major+minor>.<patch>: 3.1.0 is v0.301.0.
  local major minor patch
  IFS=. read -r major minor patch <<<"${PROMETHEUS_VERSION#v}"
  require_pin "$po" "$module" "$PROMETHEUS_OPERATOR_VERSION"
  require_pin "$prom" github.com/prometheus/prometheus "v0.$((major * 100 + minor)).$patch"

  # The operator derives its default reloader image tag from the stamped version.
  build_module prometheus-operator "$po" "$(prometheus_operator_dir)" \
    "-s -w -X $common.Version=${PROMETHEUS_OPERATOR_VERSION#v} -X $common.BuildUser=hack/bootstrap.sh" \
    "$module/cmd/operator" "$module/cmd/prometheus-config-reloader"
  local crds
  crds=$(prometheus_operator_dir)/crds
  if [ ! -d "$crds" ]; then
    # The Prometheus CRD alone is 776 KB, so the manifests are taken from the module the
    # binaries were built from rather than committed.
    local src
    src=$(cd "$po" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$module")/example/prometheus-operator-crd
    rm -rf "$crds.tmp"
    mkdir -p "$crds.tmp"
    cp "$src"/monitoring.coreos.com_*.yaml "$crds.tmp/"
    chmod 0644 "$crds.tmp"/*
    mv "$crds.tmp" "$crds"
  fi

  # stringlabels is the compact label layout Prometheus' own releases use; the web UI's assets
  # are generated files outside the module, so the UI is absent (API and health endpoints work).
  # The leading -tags reaches go build through build_module's package arguments.
  build_module prometheus "$prom" "$(prometheus_dir)" \
    "-s -w -X $common.Version=${PROMETHEUS_VERSION#v} -X $common.BuildUser=hack/bootstrap.sh" \
    -tags=stringlabels github.com/prometheus/prometheus/cmd/prometheus

  mkdir -p "$bin/monitoring"
  ln -sfn "$(prometheus_operator_dir)/operator" "$bin/monitoring/operator"
  ln -sfn "$(prometheus_operator_dir)/prometheus-config-reloader" "$bin/monitoring/prometheus-config-reloader"
  ln -sfn "$crds" "$bin/monitoring/crds"
  ln -sfn "$(prometheus_dir)/prometheus" "$bin/monitoring/prometheus"
  log "monitoring: prometheus-operator $PROMETHEUS_OPERATOR_VERSION and prometheus $PROMETHEUS_VERSION in $bin/monitoring"
}

# cert-manager's controllers and CRDs, for the operator's tests of the cert-manager path
# (controllers/cachecluster). The module proxy does not carry cert-manager's controller command
# (a module of its own), so hack/modules/cert-manager is a small main that starts the
# controllers registered in cert-manager's pkg/controller; the CRDs come from the same module.
cert_manager_dir() { echo "$cache/cert-manager-$CERT_MANAGER_VERSION-$(hash_of "$repo"/hack/modules/cert-manager/{go.mod,go.sum,main.go})"; }

step_certmanager() {
  local cm=$repo/hack/modules/cert-manager module=github.com/cert-manager/cert-manager
  require_pin "$cm" "$module" "$CERT_MANAGER_VERSION"
  build_module cert-manager "$cm" "$(cert_manager_dir)" "-s -w" .
  local crds
  crds=$(cert_manager_dir)/crds
  if [ ! -d "$crds" ]; then
    local src
    src=$(cd "$cm" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$module")/deploy/crds
    rm -rf "$crds.tmp"
    mkdir -p "$crds.tmp"
    cp "$src"/cert-manager.io_*.yaml "$crds.tmp/"
    chmod 0644 "$crds.tmp"/*
    mv "$crds.tmp" "$crds"
  fi
  ln -sfn "$(cert_manager_dir)" "$bin/cert-manager"
  log "cert-manager: $CERT_MANAGER_VERSION controllers and CRDs in $bin/cert-manager"
}

all_steps=(apt gomod kube etcd envtest tools ortools python monitoring certmanager)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${all_steps[@]}")
start=$SECONDS
for s in "${steps[@]}"; do
  declare -F "step_$s" >/dev/null || { echo "unknown step '$s' (steps: ${all_steps[*]})" >&2; exit 2; }
  "step_$s"
done
log "done in $((SECONDS - start))s"
