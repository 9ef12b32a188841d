#!/usr/bin/env bash
# Tests the shipped image (make image-test), offline:
#   1. its metadata: entrypoint, the DaemonSet's default command, the OCI labels, and that it
#      holds exactly two files, /roce-ipvlan and /roce-ipvlan-annotate, the binaries the
#      Makefile built;
#   2. its installer, run from the image's files against a temporary host CNI directory that
#      already holds an older plugin: the new binary lands by rename (a hard link to the old
#      file keeps the old content: nothing was written in place), is executable (0755), leaves
#      no temporary file, answers CNI VERSION, and a second run leaves it alone.
# The image's files are taken with `create` + `export`, not run in a container: `podman run`
# needs a runtime that can set rlimits, which unprivileged CI sandboxes may refuse (crun:
# "setrlimit RLIMIT_NOFILE: Operation not permitted"), and the installer needs none of it.
#
#   tests/image-test.sh IMAGE BINARY ANNOTATE_BINARY
# Environment: IMAGE_BUILDER (podman, the default, or docker); IMAGE_PLATFORM (the image's
# expected os/arch, default linux/amd64); IMAGE_TEST_RUNNER (a command that runs the image's
# binary, for an image of another architecture, e.g. qemu-aarch64-static).
set -euo pipefail
image=${1:?usage: tests/image-test.sh IMAGE BINARY}
binary=${2:?usage: tests/image-test.sh IMAGE BINARY ANNOTATE_BINARY}
annotate=${3:?usage: tests/image-test.sh IMAGE BINARY ANNOTATE_BINARY}
builder=${IMAGE_BUILDER:-podman}
platform=${IMAGE_PLATFORM:-linux/amd64}
read -r -a runner <<<"${IMAGE_TEST_RUNNER:-}"
repo=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
revision=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok    $*"; }
expect_eq() { # what expected found
	if [[ $2 == "$3" ]]; then pass "$1: $3"; else fail "$1: expected '$2', found '$3'"; fi
}

work=$(mktemp -d)
container=
cleanup() {
	[[ -z $container ]] || "$builder" rm -f "$container" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== image $image: metadata"
inspect() { "$builder" image inspect --format "$1" "$image"; }
expect_eq entrypoint '[/roce-ipvlan]' "$(inspect '{{.Config.Entrypoint}}')"
expect_eq cmd '[install --to /host/opt/cni/bin --wait]' "$(inspect '{{.Config.Cmd}}')"
expect_eq platform "$platform" "$(inspect '{{.Os}}/{{.Architecture}}')"
for label in version:"$version" revision:"$revision" licenses:Apache-2.0 \
	source:https://github.com/roce-ipvlan/roce-ipvlan; do
	key=org.opencontainers.image.${label%%:*}
	expect_eq "label $key" "${label#*:}" "$(inspect "{{index .Config.Labels \"$key\"}}")"
done

echo "== image $image: files"
container=$("$builder" create "$image")
mkdir "$work/rootfs"
"$builder" export "$container" | tar -x -C "$work/rootfs"
files=$(cd "$work/rootfs" && find . -mindepth 1 -not -type d | sort | tr '\n' ' ')
expect_eq "files in the image" './roce-ipvlan ./roce-ipvlan-annotate ' "$files"
if cmp -s "$annotate" "$work/rootfs/roce-ipvlan-annotate"; then
	pass "/roce-ipvlan-annotate is $annotate"
else
	fail "/roce-ipvlan-annotate differs from $annotate: the image is stale or was built from another binary"
fi
expect_eq "roce-ipvlan-annotate --version" "roce-ipvlan-annotate $version (commit $revision" \
	"$("${runner[@]}" "$work/rootfs/roce-ipvlan-annotate" --version | grep -o '^roce-ipvlan-annotate [^ ]* (commit [^,)]*')"
if cmp -s "$binary" "$work/rootfs/roce-ipvlan"; then
	pass "/roce-ipvlan is $binary"
else
	fail "/roce-ipvlan differs from $binary: the image is stale or was built from another binary"
fi
expect_eq "--version" "roce-ipvlan $version (commit $revision" \
	"$("${runner[@]}" "$work/rootfs/roce-ipvlan" --version | grep -o '^roce-ipvlan [^ ]* (commit [^,)]*')"

echo "== the image's installer into a temporary host directory"
host=$work/host/opt/cni/bin
mkdir -p "$host"
printf 'old plugin\n' >"$host/roce-ipvlan"
ln "$host/roce-ipvlan" "$work/old-link"
out=$("${runner[@]}" "$work/rootfs/roce-ipvlan" install --to "$host" 2>&1) || fail "install failed: $out"
expect_eq "install says" "installed $host/roce-ipvlan" "$out"
if cmp -s "$binary" "$host/roce-ipvlan"; then pass "the new binary is in place"; else
	fail "$host/roce-ipvlan is not the image's binary"; fi
expect_eq "the old file, through its hard link (replaced by rename, not rewritten)" \
	'old plugin' "$(cat "$work/old-link")"
expect_eq mode 755 "$(stat -c %a "$host/roce-ipvlan")"
expect_eq "files in the host directory" 'roce-ipvlan ' "$(cd "$host" && find . -mindepth 1 -printf '%P ')"
expect_eq "CNI VERSION" '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' \
	"$(env -i CNI_COMMAND=VERSION "${runner[@]}" "$host/roce-ipvlan" </dev/null)"
inode=$(stat -c %i "$host/roce-ipvlan")
out=$("${runner[@]}" "$work/rootfs/roce-ipvlan" install --to "$host" 2>&1) || fail "second install failed: $out"
expect_eq "second install says" "$host/roce-ipvlan is up to date" "$out"
expect_eq "inode after the second install (not rewritten)" "$inode" "$(stat -c %i "$host/roce-ipvlan")"

if ((failures > 0)); then
	echo "image-test: $failures check(s) failed" >&2
	exit 1
fi
echo "image-test: $image passed"
