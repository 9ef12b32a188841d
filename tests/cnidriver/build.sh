#!/usr/bin/env bash
# Build tests/cnidriver (its own go.mod: libcni by name from the Go module proxy, go.sum
# committed) and print the binary's path. Cold, the first build downloads libcni and its few
# dependencies into Go's module cache; after that it builds offline from the caches. The binary
# is rebuilt only when go.mod, go.sum, the sources or the Go version changed (a stamp beside it,
# as tests/k8s/build.sh does), so the VM scripts that each call this cost nothing when warm.
# Environment: ROCE_VM_CACHE (the harness's cache, default ~/.cache/roce-ipvlan), GO (a Go 1.26 or
# newer; default: /usr/local/go/bin/go when it is one, else `go` on PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}
out=$cache/bin/cnidriver
mkdir -p "$cache/bin"
# shellcheck source=tests/pick-go.sh
source "$here/../pick-go.sh"
go=$(pick_go cnidriver/build)
# -buildvcs=false: the binary must not change with the repository's commit alone.
export GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local CGO_ENABLED=0
# One build at a time: fabric-test and vm-test start VMs whose run.sh each call this.
exec 9>"$cache/bin/.cnidriver.lock"
flock 9
# The stamp names the inputs and the binary built from them: a binary another checkout's
# build.sh wrote to the same cache since does not pass for this one.
want=$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go | sha256sum | cut -c1-16)-$("$go" env GOVERSION)
stamp=$cache/bin/.stamp-cnidriver
if [[ ! -x $out || ! -f $stamp || $(cat "$stamp") != "$want $(sha256sum <"$out" | cut -c1-16)" ]]; then
	# Into a temporary file first: a VM of another shard may be running the old binary.
	(cd "$here" && "$go" build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
	mv -f "$out.tmp" "$out"
	echo "$want $(sha256sum <"$out" | cut -c1-16)" >"$stamp"
fi
echo "$out"
