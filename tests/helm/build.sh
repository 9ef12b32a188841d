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
# shellcheck source=tests/pick-go.sh
source "$here/../pick-go.sh"
# `helm version` names the module's version, as Helm's release builds do (its Makefile's -X).
v=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
go_tool_build helm "$here" helm.sh/helm/v4/cmd/helm \
	"-s -w -X helm.sh/helm/v4/internal/version.version=$v -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
