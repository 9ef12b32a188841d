#!/usr/bin/env bash
# Builds kustomize for tests/validate-manifests.sh from tests/kustomize/go.mod (the release
# kubectl 1.36 embeds, by name from the Go module proxy, go.sum committed), caches it and prints
# its path. Rebuilt only when go.mod, go.sum or the Go version change (a stamp, as in
# tests/k8s/build.sh). `make validate-manifests` runs early in `make test`, before the Kubernetes
# node's build, so it does not wait for that build's kubectl; this one builds in about a minute
# from cold caches (docs/testing.md).
#
#   tests/kustomize/build.sh      build when missing or stale, print the binary's path
# Environment: ROCE_VM_CACHE (default ~/.cache/roce-ipvlan), GO (a Go 1.26 or newer; default:
# /usr/local/go/bin/go when it is one, else `go` on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/pick-go.sh
source "$here/../pick-go.sh"
go_tool_build kustomize "$here" sigs.k8s.io/kustomize/kustomize/v5
