#!/usr/bin/env bash
# Builds the container images the local cluster runs, as `docker save`-format tars, with no
# registry and no Docker engine: static Go binaries from this repository, and Debian's cache
# engines with exactly the shared libraries they load (hack/images/mkimage writes the tars).
#
#   hack/images/build.sh [-o DIR] [-f docker|oci] IMAGE...
#
#   pause      localhost/cacheqos/pause:local      the pod sandbox (containerd's sandbox_image)
#   smoke      localhost/cacheqos/smoke:local      HTTP test server (/healthz, / = pod name)
#   redis      localhost/cacheqos/redis:local      Debian's redis-server, port 6379
#   memcached  localhost/cacheqos/memcached:local  Debian's memcached, port 11211
#   operator       localhost/cacheqos/operator:local       the operator, with OR-Tools
#   cache-sidecar  localhost/cacheqos/cache-sidecar:local  the sidecar, redis-server and memcached
#   loadgen        localhost/cacheqos/loadgen:local        cacheqos-loadgen
#   prometheus-operator         localhost/cacheqos/prometheus-operator:local
#   prometheus-config-reloader  localhost/cacheqos/prometheus-config-reloader:local
#   prometheus                  localhost/cacheqos/prometheus:local
#
# The last three are the monitoring stack hack/monitoring/install.sh runs, packed from the
# binaries `hack/bootstrap.sh monitoring` built (bin/monitoring).
#
# operator, cache-sidecar and loadgen are the Dockerfile's targets of the same names, built from the
# same binaries (test/chart checks the two stay in step). $CACHEQOS_VERSION (default "local")
# is stamped into them as the Dockerfile stamps its VERSION.
#
# -f oci writes OCI image layouts (oci-archives, for release; `make release`) tagged
# cacheqos/NAME:$CACHEQOS_VERSION, the chart's repository names, instead of docker archives
# tagged as above for the local cluster.
#
# DIR defaults to $CACHEQOS_IMAGE_DIR, else $HOME/.cache/cacheqos/images. Prints one line per
# image, "TAG IMAGE_ID TAR"; progress goes to stderr. Import with hack/images/import.sh TAR...
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${CACHEQOS_IMAGE_DIR:-$HOME/.cache/cacheqos/images}
version=${CACHEQOS_VERSION:-local}
format=docker
images=(pause smoke redis memcached operator cache-sidecar loadgen prometheus-operator prometheus-config-reloader prometheus)

usage() {
  echo "usage: $0 [-o DIR] [-f docker|oci] IMAGE...   (IMAGE: ${images[*]})" >&2
  exit 2
}
die() { echo "build.sh: $*" >&2; exit 1; }

while getopts o:f: opt; do
  case $opt in
    o) out=$OPTARG ;;
    f) format=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
[ "$format" = docker ] || [ "$format" = oci ] || die "-f $format: want docker or oci"
for name in "$@"; do
  [[ " ${images[*]} " == *" $name "* ]] || die "unknown image '$name' (images: ${images[*]})"
done
command -v go >/dev/null || die "go is not on PATH"

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$repo" && go build -o "$work/mkimage" ./hack/images/mkimage)

# go_static PACKAGE OUTPUT: a static binary that needs nothing from the image.
go_static() {
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$2" "$1")
}

# engine NAME: the host path of a Debian cache engine, installed by `hack/bootstrap.sh apt`.
engine() {
  local path
  path=$(command -v "$1") || die "$1 is not installed: run hack/bootstrap.sh apt"
  echo "$path"
}

# go_release CGO_ENABLED PACKAGE OUTPUT: a cacheqos binary, built as the Dockerfile builds it.
go_release() {
  (cd "$repo" && CGO_ENABLED=$1 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$3" "$2")
}

mkimage() { "$work/mkimage" -format "$format" "$@"; }

# tag NAME: the reference of image NAME in the archive.
tag() {
  if [ "$format" = oci ]; then
    echo "cacheqos/$1:$version"
  else
    echo "localhost/cacheqos/$1:local"
  fi
}

# Non-root users: 65535 is the conventional pause user, 65534 is "nobody".
image_pause() {
  go_static ./hack/images/pause "$work/pause"
  mkimage -tag "$(tag pause)" -o "$out/pause.tar" \
    -add "$work/pause:/pause" -user 65535:65535 -entrypoint '["/pause"]'
}

image_smoke() {
  go_static ./hack/images/smoke "$work/smoke"
  mkimage -tag "$(tag smoke)" -o "$out/smoke.tar" \
    -add "$work/smoke:/smoke" -user 65534:65534 -expose 8080/tcp -entrypoint '["/smoke"]'
}

# The file is copied under the name redis-server on purpose: Debian ships it as a symlink to
# redis-check-rdb, and redis picks its mode from the name it was started as.
image_redis() {
  mkimage -tag "$(tag redis)" -o "$out/redis.tar" \
    -add "$(engine redis-server):/usr/bin/redis-server" -libs \
    -dir /data:1777 -workdir /data -user 65534:65534 -expose 6379/tcp \
    -entrypoint '["/usr/bin/redis-server"]' \
    -cmd '["--port","6379","--protected-mode","no","--save","","--appendonly","no"]'
}

image_memcached() {
  mkimage -tag "$(tag memcached)" -o "$out/memcached.tar" \
    -add "$(engine memcached):/usr/bin/memcached" -libs \
    -user 65534:65534 -expose 11211/tcp \
    -entrypoint '["/usr/bin/memcached"]' -cmd '["--port=11211","--udp-port=0"]'
}

# The operator loads OR-Tools with dlopen, so it is built with cgo and -libs adds the C library
# it links. The OR-Tools libraries keep the wheel's layout under /opt/ortools (they find each
# other through $ORIGIN); the system libraries they need beyond it come from this host, as
# ldd resolves them. 65532 is the Dockerfile's user.
image_operator() {
  local wheel=$repo/bin/ortools file lib
  local adds=()
  [ -f "$wheel/ortools/.libs/libortools.so.9" ] || die "OR-Tools is not installed: run hack/bootstrap.sh ortools"
  wheel=$(cd "$wheel" && pwd -P)
  go_release 1 ./cmd/operator "$work/operator"
  while IFS= read -r file; do
    adds+=(-add "$file:/opt/ortools/${file#"$wheel"/}")
  done < <(find "$wheel/ortools/.libs" "$wheel/ortools.libs" -type f)
  while IFS= read -r lib; do
    adds+=(-add "$lib")
  done < <(ldd "$wheel/ortools/.libs/libortools.so.9" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | grep -v "^$wheel/")
  mkimage -tag "$(tag operator)" -o "$out/operator.tar" \
    -add "$work/operator:/operator" -libs "${adds[@]}" \
    -env CACHEQOS_ORTOOLS_LIB=/opt/ortools/ortools/.libs/libortools.so.9 \
    -user 65532:65532 -entrypoint '["/operator"]'
}

# The sidecar binary is static; the engines come with the libraries they load. The operator's
# DaemonSet copies /cache-sidecar into the engine container, and this image is the default
# engine image of both engines.
image_cache-sidecar() {
  go_release 0 ./cmd/cache-sidecar "$work/cache-sidecar"
  mkimage -tag "$(tag cache-sidecar)" -o "$out/cache-sidecar.tar" \
    -add "$work/cache-sidecar:/cache-sidecar" \
    -add "$(engine redis-server):/usr/bin/redis-server" -add "$(engine memcached):/usr/bin/memcached" -libs \
    -user 65532:65532 -entrypoint '["/cache-sidecar"]'
}

image_loadgen() {
  go_release 0 ./cmd/cacheqos-loadgen "$work/cacheqos-loadgen"
  mkimage -tag "$(tag loadgen)" -o "$out/loadgen.tar" \
    -add "$work/cacheqos-loadgen:/cacheqos-loadgen" -user 65532:65532 -entrypoint '["/cacheqos-loadgen"]'
}

# monitoring_binary NAME: a binary of `hack/bootstrap.sh monitoring`.
monitoring_binary() {
  local path=$repo/bin/monitoring/$1
  [ -x "$path" ] || die "$path is missing: run hack/bootstrap.sh monitoring"
  echo "$path"
}

# prometheus-operator starts the Prometheus containers with these images' own entrypoints,
# except the reloader, which it starts as /bin/prometheus-config-reloader.
image_prometheus-operator() {
  mkimage -tag "$(tag prometheus-operator)" -o "$out/prometheus-operator.tar" \
    -add "$(monitoring_binary operator):/bin/operator" \
    -user 65534:65534 -expose 8080/tcp -entrypoint '["/bin/operator"]'
}

image_prometheus-config-reloader() {
  mkimage -tag "$(tag prometheus-config-reloader)" -o "$out/prometheus-config-reloader.tar" \
    -add "$(monitoring_binary prometheus-config-reloader):/bin/prometheus-config-reloader" \
    -user 65534:65534 -entrypoint '["/bin/prometheus-config-reloader"]'
}

# The operator mounts the configuration under /etc/prometheus and the data at /prometheus.
image_prometheus() {
  mkimage -tag "$(tag prometheus)" -o "$out/prometheus.tar" \
    -add "$(monitoring_binary prometheus):/bin/prometheus" -dir /prometheus:0777 -workdir /prometheus \
    -user 65534:65534 -expose 9090/tcp -entrypoint '["/bin/prometheus"]'
}

for name in "$@"; do
  start=$SECONDS
  "image_$name"
  echo "build.sh: $name: $(du -h "$out/$name.tar" | cut -f1) in $((SECONDS - start))s" >&2
done
