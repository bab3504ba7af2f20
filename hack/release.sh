#!/usr/bin/env bash
# Writes a release into DIR (default dist/): the operator, sidecar and loadgen images as OCI
# archives and the packaged Helm chart, all with one version, and their SHA256SUMS.
#
#   hack/release.sh [DIR]        # VERSION=1.2.3 hack/release.sh; default: the chart's version
#
#   DIR/cacheqos-VERSION.tgz              the chart, version and appVersion VERSION
#   DIR/operator-VERSION.oci.tar          cacheqos/operator:VERSION
#   DIR/cache-sidecar-VERSION.oci.tar     cacheqos/cache-sidecar:VERSION
#   DIR/loadgen-VERSION.oci.tar           cacheqos/loadgen:VERSION
#
# The binaries carry VERSION (main.version), the images' tags are VERSION, and the chart's
# default image tag is its appVersion, so the chart installs exactly these images once they are
# pushed under its image repositories (e.g. `skopeo copy oci-archive:DIR/operator-VERSION.oci.tar
# docker://REGISTRY/cacheqos/operator:VERSION`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dist=${1:-$repo/dist}
chart=$repo/charts/cacheqos
version=${VERSION:-$(awk '$1 == "version:" { print $2 }' "$chart/Chart.yaml")}
# A SemVer 2 version, as helm requires of a chart and as an image tag allows.
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release.sh: version '$version' is not MAJOR.MINOR.PATCH[-PRERELEASE]" >&2; exit 1; }
helm=$(command -v helm || echo "$repo/bin/helm")

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

CACHEQOS_VERSION=$version "$repo/hack/images/build.sh" -o "$work" -f oci operator cache-sidecar loadgen >/dev/null
for image in operator cache-sidecar loadgen; do
  mv "$work/$image.tar" "$dist/$image-$version.oci.tar"
done
"$helm" package "$chart" --version "$version" --app-version "$version" --destination "$dist" >/dev/null
(cd "$dist" && sha256sum "cacheqos-$version.tgz" operator-"$version".oci.tar cache-sidecar-"$version".oci.tar loadgen-"$version".oci.tar >SHA256SUMS)
echo "release $version in $dist:"
(cd "$dist" && ls -l --time-style=+ "cacheqos-$version.tgz" ./*-"$version".oci.tar SHA256SUMS | awk '{ print "  " $NF, $5 }')
