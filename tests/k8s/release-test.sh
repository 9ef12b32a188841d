#!/usr/bin/env bash
# On the node (make release-test: tests/k8s/run.sh tests/k8s/release-test.sh DIST): install a
# release folder (make release; docs/deploy.md#install-a-release) from its files alone, as its
# steps say: `sha256sum -c SHA256SUMS`, the image index archive loaded into the node's
# containerd (`ctr -n k8s.io images import`: the node has no registry for ghcr.io, so the
# installer's pods can start only from the imported image), then the chart package through
# the chart test (suite/85-helm.sh: install, `helm test`, upgrade to mode=uninstall, uninstall,
# the kustomize install put back) with the image the package names by default,
# ghcr.io/roce-ipvlan/roce-ipvlan:<version>, and the folder's amd64 binary as the one it must
# install. Prints the suite's lines and exits with its status.
set -euo pipefail
dist=$(cd "${1:?usage: release-test.sh DIST (dist/roce-ipvlan-<version>)}" && pwd)
version=${dist##*/roce-ipvlan-}
image=ghcr.io/roce-ipvlan/roce-ipvlan:$version
(cd "$dist" && sha256sum -c --quiet SHA256SUMS) || { echo "release-test: $dist: SHA256SUMS does not check" >&2; exit 1; }
if ctr -n k8s.io images ls -q | grep -qx "$image"; then
	echo "release-test: $image is on the node before the import" >&2
	exit 1
fi
ctr -n k8s.io images import "$dist/roce-ipvlan-$version-image.oci.tar" >&2
ctr -n k8s.io images ls -q | grep -qx "$image" ||
	{ echo "release-test: the import named no $image: $(ctr -n k8s.io images ls -q | tr '\n' ' ')" >&2; exit 1; }
HELM_CHART=$dist/roce-ipvlan-$version.tgz HELM_IMAGE=$image HELM_BIN=$dist/roce-ipvlan-linux-amd64 \
	exec bash "$(dirname "$0")/suite/run.sh" '^test_helm_'
