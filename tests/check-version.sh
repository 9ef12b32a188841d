#!/usr/bin/env bash
# One version source: [workspace.package] version in Cargo.toml. Every other place that names
# the release must agree with it (make lint runs this):
#   - each image reference ghcr.io/roce-ipvlan/roce-ipvlan:<tag> in deploy/, examples/, docs/,
#     charts/, README.md, and the kustomizations' newTag (deploy/base/, examples/);
#   - the Helm chart's version and appVersion (charts/roce-ipvlan/Chart.yaml);
#   - CHANGELOG.md has a section for the version (or the version is still Unreleased);
#   - Cargo.lock records the same version for the roce-ipvlan package.
# The Makefile derives IMAGE and the image's version label from Cargo.toml itself.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	{ echo "check-version: no [workspace.package] version in Cargo.toml (found '$version')" >&2; exit 1; }
bad=0
while IFS=: read -r file line ref; do
	tag=${ref##*:}
	# An architecture's own tag (docs/deploy.md) is the version plus -amd64 or -arm64.
	if [[ $tag != "$version" && $tag != "$version-amd64" && $tag != "$version-arm64" ]]; then
		echo "check-version: $file:$line: image tag $tag, expected $version (Cargo.toml)" >&2
		bad=1
	fi
done < <(grep -rnoE 'ghcr\.io/roce-ipvlan/roce-ipvlan:[A-Za-z0-9._-]+' \
	deploy examples docs charts README.md || true)
while IFS=: read -r file line tag; do
	tag=$(tr -d ' "' <<<"${tag#*newTag}")
	tag=${tag#:}
	[[ $tag == "$version" ]] ||
		{ echo "check-version: $file:$line: newTag $tag, expected $version" >&2; bad=1; }
done < <(grep -rn 'newTag:' deploy examples || true)
if ! grep -qE "^## \[?$version\]?( |$)" CHANGELOG.md; then
	echo "check-version: CHANGELOG.md has no '## $version' section" >&2
	bad=1
fi
for key in version appVersion; do
	chart=$(sed -n "s/^$key: \"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" charts/roce-ipvlan/Chart.yaml)
	[[ $chart == "$version" ]] ||
		{ echo "check-version: charts/roce-ipvlan/Chart.yaml: $key $chart, expected $version" >&2; bad=1; }
done
lock=$(awk '/^name = "roce-ipvlan"$/ { getline; print }' Cargo.lock)
[[ $lock == "version = \"$version\"" ]] ||
	{ echo "check-version: Cargo.lock has roce-ipvlan $lock, expected $version (cargo update -p roce-ipvlan)" >&2; bad=1; }
((bad == 0)) || exit 1
echo "check-version: $version everywhere"
