#!/usr/bin/env bash
# Checks a release folder as a user receives it (make release runs it last;
# docs/deploy.md#install-a-release):
#   1. SHA256SUMS covers every other file, and `sha256sum -c` passes;
#   2. each binary answers --version with the folder's version (arm64 under qemu-aarch64-static
#      on another host; skipped with a note when it is missing);
#   3. each architecture's image archive loads with `podman load` into an empty store of its
#      own, is of its architecture, carries the version label, and holds exactly the two
#      binaries, byte-identical to the folder's (taken out with create + export: `podman run`
#      needs a runtime that may set rlimits, which sandboxed machines refuse);
#   4. the image index lists one image per architecture archive;
#   5. the chart package passes `helm lint --strict` and renders, from the archive, with the
#      image ghcr.io/roce-ipvlan/roce-ipvlan:<version> (helm-python-sdk, VALIDATE_VENV);
#   6. each bundle names that image and only it.
#
#   tests/release-check.sh dist/roce-ipvlan-<version>
set -euo pipefail
dir=${1:?usage: tests/release-check.sh dist/roce-ipvlan-VERSION}
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan/validate-venv}
dir=$(cd "$dir" && pwd)
version=${dir##*/roce-ipvlan-}
image=ghcr.io/roce-ipvlan/roce-ipvlan:$version
fail() { echo "release-check: $*" >&2; exit 1; }
ok() { echo "ok    $*"; }

store=$(mktemp -d)
trap 'podman --root "$store/root" --runroot "$store/run" --storage-driver vfs rm -af >/dev/null 2>&1 || true; rm -rf "$store"' EXIT
pm() { podman --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }

cd "$dir"
listed=$(awk '{print $2}' SHA256SUMS | sort)
present=$(find . -type f ! -name SHA256SUMS -printf '%P\n' | sort)
[[ $listed == "$present" ]] || fail "SHA256SUMS lists: $listed; the folder holds: $present"
sha256sum -c --quiet SHA256SUMS || fail "sha256sum -c SHA256SUMS failed"
ok "SHA256SUMS: $(wc -l <SHA256SUMS) files"

archs=()
for b in roce-ipvlan-linux-*; do
	plat=${b#roce-ipvlan-linux-}
	archs+=("$plat")
	for bin in "roce-ipvlan-linux-$plat" "roce-ipvlan-annotate-linux-$plat"; do
		[[ -x $bin ]] || fail "$bin missing or not executable"
		runner=()
		if [[ $plat == arm64 && $(uname -m) != aarch64 ]]; then
			command -v qemu-aarch64-static >/dev/null || { echo "note  $bin: not run (no qemu-aarch64-static; make release-deps)"; continue; }
			runner=(qemu-aarch64-static)
		fi
		out=$("${runner[@]}" "./$bin" --version)
		[[ $out == *" $version "* ]] || fail "$bin --version: '$out', expected version $version"
		ok "$bin: $out"
	done

	archive=roce-ipvlan-$version-image-linux-$plat.oci.tar
	pm load -q -i "$archive" >/dev/null || fail "podman load -i $archive failed"
	ref=$image-$plat
	read -r arch label < <(pm inspect --format '{{.Architecture}} {{index .Labels "org.opencontainers.image.version"}}' "$ref")
	[[ $arch == "$plat" && $label == "$version" ]] || fail "$archive: $ref is $arch, version label $label; expected $plat, $version"
	c=$(pm create --arch "$plat" "$ref")
	mkdir "$store/$plat" && pm export "$c" | tar -x -C "$store/$plat"
	files=$(cd "$store/$plat" && find . -mindepth 1 -printf '%P\n' | sort | tr '\n' ' ')
	[[ $files == "roce-ipvlan roce-ipvlan-annotate " ]] || fail "$archive: the image holds $files"
	for bin in roce-ipvlan roce-ipvlan-annotate; do
		cmp -s "$store/$plat/$bin" "$bin-linux-$plat" || fail "$archive: the image's /$bin differs from $bin-linux-$plat"
	done
	ok "$archive: podman load gives $ref ($arch), the two binaries, byte-identical"
done
((${#archs[@]} > 0)) || fail "no roce-ipvlan-linux-* binaries"

if ((${#archs[@]} > 1)); then
	index=roce-ipvlan-$version-image.oci.tar
	platforms=$(skopeo inspect --raw "oci-archive:$index" |
		python3 -c 'import json, sys; print(" ".join(sorted(m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')
	[[ $platforms == "$(printf '%s\n' "${archs[@]}" | sort | tr '\n' ' ' | sed 's/ $//')" ]] ||
		fail "$index lists $platforms, expected ${archs[*]}"
	ok "$index: an image index of $platforms"
fi

"$venv/bin/python" - "roce-ipvlan-$version.tgz" "$image" <<'PY' || fail "the chart package fails the checks above"
import sys, yaml, helm_python as helm
tgz, image = sys.argv[1:]
report = helm.lint(tgz, strict=True, kube_version="v1.36.0")
problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
chart = helm.Chart.load_archive(open(tgz, "rb").read())
docs = [d for t, text in chart.render(None, name="roce-ipvlan", namespace="roce-ipvlan", is_install=True).items()
        if t.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
images = {c["image"] for d in docs if d["kind"] == "DaemonSet" for c in d["spec"]["template"]["spec"]["containers"]}
for p in problems:
    print(f"ERROR helm lint {tgz}: {p}")
if images != {image}:
    print(f"ERROR {tgz}: renders the image {images}, expected {image}")
    sys.exit(1)
print(f"ok    {tgz}: helm lint --strict, renders {len(docs)} objects with {image}")
sys.exit(1 if problems else 0)
PY

for y in roce-ipvlan-"$version"*.yaml; do
	images=$(sed -n 's/^ *image: //p' "$y" | sort -u)
	[[ $images == "$image" ]] || fail "$y names the images $images, expected $image"
	ok "$y: $(grep -c '^kind:' "$y") objects, image $image"
done
cd "$repo"
echo "release-check: $dir passed"
