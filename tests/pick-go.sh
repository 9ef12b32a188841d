# shellcheck shell=bash
# pick_go WHO: print the first Go 1.26 or newer among $GO, /usr/local/go/bin/go and `go` on PATH
# (the go lines of the harness's modules; Debian's golang-go is older), or say which were tried
# (WHO names the caller) and fail. Sourced by the harness's Go build scripts: tests/k8s/build.sh,
# tests/kustomize/build.sh, tests/cnidriver/build.sh.
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
