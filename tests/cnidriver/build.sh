#!/usr/bin/env bash
# Build tests/cnidriver against Debian's libcni source (golang-github-appc-cni-dev) in GOPATH
# mode, offline, and print the binary's path. Debian ships the Go sources under
# /usr/share/gocode/src; a throwaway GOPATH links them next to the driver.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}
out=$cache/bin/cnidriver
gopath=$(mktemp -d)
trap 'rm -rf "$gopath"' EXIT
mkdir -p "$gopath/src/roce-ipvlan" "$cache/bin"
ln -s /usr/share/gocode/src/github.com "$gopath/src/github.com"
ln -s "$here" "$gopath/src/roce-ipvlan/cnidriver"
(cd "$gopath/src/roce-ipvlan/cnidriver" &&
	GOPATH=$gopath GO111MODULE=off GOFLAGS="" CGO_ENABLED=0 go build -o "$out" .)
echo "$out"
