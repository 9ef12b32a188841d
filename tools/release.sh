#!/usr/bin/env bash
# The release folder (make release; docs/deploy.md#install-a-release), and what it needs
# (make release-deps):
#
#   tools/release.sh deps    install what is missing: the musl Rust target of each
#                            architecture (rustup), the aarch64 C cross compiler ring needs and
#                            qemu-user-static (runs the arm64 binaries' --version here), skopeo
#                            (apt-get, as root), cargo-cyclonedx (cargo install into ~/.cargo)
#   tools/release.sh build   deps, then dist/roce-ipvlan-$VERSION/: the static binaries and
#                            the image (an OCI archive) of each architecture, the multi-arch
#                            image index, the Helm chart package, the kustomize bundles, the
#                            SBOMs and SHA256SUMS over all of it, then tests/release-check.sh
#
# Environment (the Makefile passes it): VERSION (must equal CARGO_VERSION, Cargo.toml's
# [workspace.package] version: the binaries report that one), CARGO_VERSION, IMAGE_REPO,
# IMAGE_BUILDER (podman), RELEASE_ARCHES (default "x86_64 aarch64"), MAKE, CARGO, VALIDATE_VENV
# (the helm-python-sdk venv of tests/validate-manifests.sh), RELEASE_ALLOW_DIRTY (build from
# uncommitted sources).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
: "${VERSION:?}" "${CARGO_VERSION:?}"
image_repo=${IMAGE_REPO:-ghcr.io/roce-ipvlan/roce-ipvlan}
builder=${IMAGE_BUILDER:-podman}
arches=${RELEASE_ARCHES:-x86_64 aarch64}
make=${MAKE:-make}
cargo=${CARGO:-cargo}
venv=${VALIDATE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan/validate-venv}
dist=dist/roce-ipvlan-$VERSION
host=$(uname -m)

say() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }
platform() { case $1 in x86_64 | amd64) echo amd64 ;; aarch64 | arm64) echo arm64 ;; *) die "unknown architecture $1" ;; esac; }

check_version() {
	[[ $VERSION == "$CARGO_VERSION" ]] || die "VERSION=$VERSION, but Cargo.toml's [workspace.package] version is $CARGO_VERSION, and the binaries report that version (roce-ipvlan --version). To release $VERSION, set version = \"$VERSION\" there, run 'cargo update -p roce-ipvlan' and update what tests/check-version.sh checks (the chart's version and appVersion, newTag in deploy/base/kustomization.yaml and examples/, the image references, a CHANGELOG.md section); or run make release without VERSION= to release $CARGO_VERSION."
	tests/check-version.sh >/dev/null
	# The binaries and the image name the commit they are built from (--version, the
	# .revision label): what goes into them must be that commit.
	if [[ -z ${RELEASE_ALLOW_DIRTY:-} ]] && ! git diff --quiet HEAD -- plugin Cargo.toml Cargo.lock deploy charts; then
		die "plugin/, Cargo.toml, Cargo.lock, deploy/ or charts/ differ from HEAD ($(git rev-parse --short HEAD)), which the binaries will name: commit first (RELEASE_ALLOW_DIRTY=1 builds anyway)"
	fi
}

deps() {
	local arch pkgs=() p
	for arch in $arches; do
		local t=$arch-unknown-linux-musl
		[[ $arch != arm64 ]] || t=aarch64-unknown-linux-musl
		[[ $arch != amd64 ]] || t=x86_64-unknown-linux-musl
		rustup target list --installed | grep -qx "$t" || { say "rustup target add $t"; rustup target add "$t"; }
		if [[ $(platform "$arch") == arm64 && $host != aarch64 ]]; then
			pkgs+=(gcc-aarch64-linux-gnu qemu-user-static)
		fi
	done
	pkgs+=(skopeo binutils git "$builder")
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if ((${#missing[@]} > 0)); then
		say "apt-get install ${missing[*]}"
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
	fi
	command -v cargo-cyclonedx >/dev/null ||
		{ say "cargo install --locked cargo-cyclonedx"; "$cargo" install --locked cargo-cyclonedx; }
	say "deps: all present (rustup targets for: $arches; ${pkgs[*]}; cargo-cyclonedx)"
}

# The chart package as `helm package` makes it: Helm's own code, through helm-python-sdk
# (tests/release-check.sh lints and renders it from the archive).
package_chart() {
	"$venv/bin/python" -c 'import helm_python' 2>/dev/null ||
		die "no helm-python-sdk in $venv: run tests/validate-manifests.sh once (make validate-manifests), which installs it"
	"$venv/bin/python" -c 'import sys, helm_python as helm; print("release:", helm.package(sys.argv[1], destination=sys.argv[2]))' \
		charts/roce-ipvlan "$dist"
	[[ -f $dist/roce-ipvlan-$VERSION.tgz ]] || die "helm package made no $dist/roce-ipvlan-$VERSION.tgz"
}

# A kustomize build, checked to name the image as it will be published.
bundle() { # DIR OUT
	kubectl kustomize "$1" >"$2"
	local images
	images=$(sed -n 's/^ *image: //p' "$2" | sort -u)
	[[ $images == "$image_repo:$VERSION" ]] || die "$2: images '$images', expected $image_repo:$VERSION"
	say "$2: kubectl kustomize $1, $(grep -c '^kind:' "$2") objects"
}

# One SBOM per architecture: the crates of Cargo.lock its binaries are built from (no build
# scripts' or tests' dependencies; the target's, since a dependency may be per target).
sbom() {
	local arch plat t name
	for arch in $arches; do
		plat=$(platform "$arch")
		t=$( [[ $plat == amd64 ]] && echo x86_64 || echo aarch64)-unknown-linux-musl
		name=roce-ipvlan-$VERSION-linux-$plat.cdx
		"$cargo" cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 --no-build-deps \
			--target "$t" --override-filename "$name"
		mv "plugin/$name.json" "$dist/$name.json"
		say "$dist/$name.json: CycloneDX 1.5, $(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["components"]))' "$dist/$name.json") crates"
	done
}

build() {
	local arch plat t started=$SECONDS images=()
	rm -rf "$dist" && mkdir -p "$dist"
	for arch in $arches; do
		plat=$(platform "$arch")
		t=$( [[ $plat == amd64 ]] && echo x86_64 || echo aarch64)-unknown-linux-musl
		say "linux/$plat: make image (static musl binaries, then the image)"
		# STATIC_LIBC=musl: a release never falls back to the glibc build.
		env -u MAKEFLAGS -u MAKELEVEL STATIC_LIBC=musl "$make" --no-print-directory image \
			IMAGE_ARCH="$arch" IMAGE="$image_repo:$VERSION-$plat" IMAGE_BUILDER="$builder"
		for b in roce-ipvlan roce-ipvlan-annotate; do
			install -m 0755 "target/$t/release/$b" "$dist/$b-linux-$plat"
		done
		rm -f "$dist/roce-ipvlan-$VERSION-image-linux-$plat.oci.tar"
		"$builder" save --format oci-archive -o "$dist/roce-ipvlan-$VERSION-image-linux-$plat.oci.tar" "$image_repo:$VERSION-$plat"
		images+=("$image_repo:$VERSION-$plat")
	done
	# The image index of all of them, as a registry will hold it under the plain version tag
	# (skopeo copy --all oci-archive:... docker://...).
	# The list is made under a local name of its own: $image_repo:$VERSION in the local store
	# is what make image and make image-test build and test, and stays theirs.
	if ((${#images[@]} > 1)); then
		local list=localhost/roce-ipvlan-release:$VERSION
		"$builder" manifest rm "$list" >/dev/null 2>&1 || true
		"$builder" manifest create "$list" "${images[@]/#/containers-storage:}" >/dev/null
		"$builder" manifest push --all --format oci "$list" "oci-archive:$dist/roce-ipvlan-$VERSION-image.oci.tar:$image_repo:$VERSION"
		"$builder" manifest rm "$list" >/dev/null
	fi
	package_chart
	bundle deploy "$dist/roce-ipvlan-$VERSION.yaml"
	bundle deploy/uninstall "$dist/roce-ipvlan-$VERSION-uninstall.yaml"
	bundle deploy/openshift "$dist/roce-ipvlan-$VERSION-openshift.yaml"
	bundle deploy/uninstall/openshift "$dist/roce-ipvlan-$VERSION-uninstall-openshift.yaml"
	sbom
	local files
	files=$(cd "$dist" && find . -type f -printf '%P\n' | sort)
	# shellcheck disable=SC2086 # the release's own file names: no blanks
	(cd "$dist" && sha256sum $files >SHA256SUMS && sha256sum -c SHA256SUMS)
	tests/release-check.sh "$dist"
	say "made $dist in $((SECONDS - started)) s (checked: tests/release-check.sh):"
	ls -l "$dist"
}

case ${1:-build} in
deps) deps ;;
build)
	check_version
	deps
	build
	;;
*) die "usage: tools/release.sh deps|build" ;;
esac
