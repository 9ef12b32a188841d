# shellcheck shell=bash
# pick_go WHO: print the first Go 1.26 or newer among $GO, /usr/local/go/bin/go and `go` on PATH
# (the go lines of the harness's modules; Debian's golang-go is older), or say which were tried
# (WHO names the caller) and fail. Sourced by the harness's Go build scripts: tests/k8s/build.sh,
# tests/kustomize/build.sh, tests/helm/build.sh, tests/cnidriver/build.sh.
pick_go() {
	local g v
	for g in ${GO:-} /usr/local/go/bin/go go; do
		command -v "$g" >/dev/null 2>&1 || continue
		v=$("$g" env GOVERSION 2>/dev/null) || continue
		v=${v#go}
		if [[ $(printf '%s\n' 1.26 "${v%%[a-z]*}" | sort -V | head -1) == 1.26 ]]; then
			echo "$g"
			return 0
		fi
	done
	echo "$1: no Go 1.26 or newer found (tried GO=${GO:-unset}, /usr/local/go/bin/go, go on PATH);" \
		"install it or point GO at it" >&2
	return 1
}

# go_tool_build NAME DIR PACKAGE [LDFLAGS]: build the command PACKAGE with the go.mod of DIR (its
# modules by name from the proxy, go.sum committed) into the cache (ROCE_VM_CACHE, default
# ~/.cache/roce-ipvlan) as NAME/NAME, under a lock, and print its path. Rebuilt only when go.mod,
# go.sum or the Go version change (a stamp). tests/kustomize/build.sh and tests/helm/build.sh.
go_tool_build() {
	local name=$1 dir=$2 pkg=$3 ld=${4:--s -w} bin go want start
	bin=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}/$name
	mkdir -p "$bin"
	exec 9>"$bin/.build.lock"
	flock 9
	go=$(pick_go "$name/build") || return 1
	want=$(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-16)-$("$go" env GOVERSION)
	if [[ ! -x $bin/$name || ! -f $bin/.stamp || $(cat "$bin/.stamp") != "$want" ]]; then
		echo "$name/build: building $name with $("$go" env GOVERSION)" >&2
		start=$SECONDS
		(cd "$dir" && GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0 \
			"$go" build -trimpath -ldflags "$ld" -o "$bin/$name.tmp" "$pkg") || return 1
		mv -f "$bin/$name.tmp" "$bin/$name"
		echo "$name/build: built in $((SECONDS - start))s" >&2
		echo "$want" >"$bin/.stamp"
	fi
	echo "$bin/$name"
}
