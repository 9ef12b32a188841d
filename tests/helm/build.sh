#!/usr/bin/env bash
# Builds helm for the Kubernetes node's chart test (tests/k8s/suite/85-helm.sh) from
# tests/helm/go.mod (Helm v4's command by name from the Go module proxy, go.sum committed),
# caches it and prints its path; tests/k8s/build.sh puts it in the node's bin/ (on its PATH).
# Rebuilt only when go.mod, go.sum or the Go version change (a stamp, as tests/kustomize/build.sh
# does). Cold, the build downloads Helm's dependencies and takes a few minutes on 2 cores
# (docs/testing.md gives the times). `make validate-manifests` needs no binary: it uses Helm as
# a library (helm-python-sdk).
#
#   tests/helm/build.sh      build when missing or stale, print the binary's path
# Environment: ROCE_VM_CACHE (default ~/.cache/roce-ipvlan), GO (a Go 1.26 or newer; default:
# /usr/local/go/bin/go when it is one, else `go` on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}/helm
mkdir -p "$bin"
exec 9>"$bin/.build.lock"
flock 9

# shellcheck source=tests/pick-go.sh
source "$here/../pick-go.sh"
go=$(pick_go helm/build)
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

want=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)-$("$go" env GOVERSION)
if [[ ! -x $bin/helm || ! -f $bin/.stamp || $(cat "$bin/.stamp") != "$want" ]]; then
	echo "helm/build: building helm with $("$go" env GOVERSION)" >&2
	start=$SECONDS
	# `helm version` names the module's version, as Helm's release builds do (its Makefile's -X).
	v=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
	ld="-s -w -X helm.sh/helm/v4/internal/version.version=$v -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
	(cd "$here" && "$go" build -trimpath -ldflags "$ld" -o "$bin/helm.tmp" helm.sh/helm/v4/cmd/helm)
	mv -f "$bin/helm.tmp" "$bin/helm"
	echo "helm/build: built in $((SECONDS - start))s" >&2
	echo "$want" >"$bin/.stamp"
fi
echo "$bin/helm"
