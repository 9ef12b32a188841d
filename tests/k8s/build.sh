#!/usr/bin/env bash
# Builds what the Kubernetes test node runs (tests/k8s/run.sh), caches it and prints the cache
# directory. Everything comes from the project's own go.mod files under tests/k8s/go (modules by
# name from the Go module proxy, go.sum committed), Debian's packages and this repository:
#
#   bin/     kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl (k8s.io/
#            kubernetes), etcd (go.etcd.io/etcd/server/v3), containerd, ctr and the runc shim
#            (containerd/v2), runc (opencontainers/runc, with libseccomp), multus,
#            thin_entrypoint, install_multus, passthru-cni, multus-daemon, multus-shim
#            (multus-cni.v4), railpf (our device
#            plugin offering the rails by PCI address, tests/k8s/go/railpf), helm (tests/helm; not with
#            K8S_HELM=0)
#   registry/  container images as OCI image layouts, one folder per repository, which
#            tests/k8s/registry.py serves to the node's containerd as registry "localhost": the
#            pause image, Multus thin and thick, the roce-ipvlan installer image (make image), a changed
#            installer image for the rollout test, and the test-pod image
#
# Each part is rebuilt only when its inputs change (a stamp of go.mod, go.sum, the Go version
# and the flags; of the Containerfile and its files for images). Go's own module and build
# caches make a rebuild after a small change fast; the first build of Kubernetes on 2 cores
# takes long (docs/testing.md gives the times).
#
#   tests/k8s/build.sh            build what is missing or stale, print the cache directory
#   tests/k8s/build.sh --control-plane
#                                 only the Kubernetes binaries and etcd (tests/k8s/crd-test.sh:
#                                 an API server on the host needs no node, images or installer)
# Environment: ROCE_VM_CACHE (the harness's cache, default ~/.cache/roce-ipvlan), GO (a Go 1.26
# or newer; default: /usr/local/go/bin/go when it is one, else `go` on PATH), IMAGE_BUILDER
# (podman), ROCE_IPVLAN_IMAGE (the installer image the node runs, default
# localhost/roce-ipvlan:<version>; built with `make image IMAGE=...`), K8S_HELM (0: no helm).
set -euo pipefail
control_plane=0
case ${1:-} in
--control-plane) control_plane=1 ;;
'') ;;
*) echo "usage: build.sh [--control-plane]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}/k8s
bin=$cache/bin
images=$cache/registry
mkdir -p "$bin" "$images"
log() { echo "k8s/build: $*" >&2; }
# One build at a time: `make test` starts one in the background while the VM tiers run, and
# the one k8s-test runs waits here for it, then finds everything built.
exec 9>"$cache/.build.lock"
flock 9

# --- Go: the harness needs 1.26 (the go lines of our modules); Debian's golang-go is older. ---
# shellcheck source=tests/pick-go.sh
source "$here/../pick-go.sh"
go=$(pick_go k8s/build)
export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

# build_go MODULE_DIR STAMP_EXTRA PACKAGE... : go build into bin/ when the stamp changed.
build_go() {
	local name=$1 dir=$here/go/$1 extra=$2
	shift 2
	local stamp want p missing=0
	want=$(cat "$dir/go.mod" "$dir/go.sum" "$dir"/*.go 2>/dev/null | sha256sum | cut -c1-16)-$("$go" env GOVERSION)-$(echo "$extra ${TAGS:-} $CGO_ENABLED" | sha256sum | cut -c1-8)
	stamp=$bin/.stamp-$name
	for p in "$@"; do [[ -x $bin/${p##*/} ]] || missing=1; done
	if ((!missing)) && [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return 0; fi
	log "building $name ($*) with $("$go" env GOVERSION)"
	local start=$SECONDS
	(cd "$dir" && "$go" build -trimpath -tags "${TAGS:-}" -ldflags "$extra" -o "$bin/" "$@")
	log "built $name in $((SECONDS - start))s"
	echo "$want" >"$stamp"
}

# modver MODULE_DIR MODULE: the version our go.mod requires.
modver() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print substr($2, 2); exit}' "$here/go/$1/go.mod"; }
kver=$(modver kube k8s.io/kubernetes)
kld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kld+=" -X $p.gitVersion=v$kver -X $p.gitMajor=${kver%%.*} -X $p.gitMinor=$(echo "$kver" | cut -d. -f2) -X $p.gitTreeState=clean"
done
build_go kube "$kld" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
build_go etcd "-s -w" roce-ipvlan.test/k8s/etcd
if ((control_plane)); then
	echo "$cache"
	exit 0
fi
cver=$(modver containerd github.com/containerd/containerd/v2)
build_go containerd "-s -w -X github.com/containerd/containerd/v2/version.Version=v$cver" \
	github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
# runc links libseccomp (cgo), as its releases do: the node's RuntimeDefault seccomp profiles.
CGO_ENABLED=1 TAGS=seccomp build_go runc "-s -w -X main.version=$(modver runc github.com/opencontainers/runc)" \
	github.com/opencontainers/runc
build_go multus "-s -w" gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus \
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/thin_entrypoint \
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/install_multus \
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/passthru-cni \
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-daemon \
	gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-shim
# The rails' device plugin (stands in for the SR-IOV network device plugin, which the proxy refuses).
build_go railpf "-s -w" roce-ipvlan.test/k8s/railpf
# helm for the chart test (suite/85-helm.sh: make k8s-test-control, make release-test): its own
# go.mod and cache (tests/helm/build.sh). K8S_HELM=0 leaves it out: make test's k8s tier runs no
# chart test, and helm's first build is about 8 min of the 2 cores (docs/testing.md).
if [[ ${K8S_HELM:-1} != 0 ]]; then
	helm=$("$here/../helm/build.sh")
	if ! cmp -s "$helm" "$bin/helm"; then
		cp "$helm" "$bin/helm.tmp" && mv -f "$bin/helm.tmp" "$bin/helm"
	fi
fi
mkdir -p "$cache/manifests"
multus_dir=$(cd "$here/go/multus" && "$go" list -m -f '{{.Dir}}' gopkg.in/k8snetworkplumbingwg/multus-cni.v4)
cp "$multus_dir/deployments/multus-daemonset.yml" "$multus_dir/deployments/multus-daemonset-thick.yml" "$cache/manifests/"

# Upstream trees the Go module proxy here refuses by name (../shared/upstream/README.md):
# upstream_src NAME MODULE VERSION TARBALL SHA256 prints the source tree's directory: the module
# cache's where the proxy serves MODULE@VERSION (a user's machine), else TARBALL, checked against
# SHA256, unpacked once into the cache's src/NAME. Each tree's version is named once, below.
upstream_src() {
	local name=$1 module=$2 version=$3 tar=$4 sha256=$5 d dir=$cache/src/$1
	if d=$(cd / && GOFLAGS='' "$go" mod download -json "$module@$version" 2>/dev/null |
		jq -er 'select(.Error == null) | .Dir'); then
		echo "$d"
		return 0
	fi
	if [[ ! -f $dir/go.mod ]]; then
		[[ -r $tar ]] || {
			log "$name: the module proxy does not serve $module@$version and $tar is missing"
			return 1
		}
		echo "$sha256  $tar" | sha256sum -c --quiet >&2 || {
			log "$name: $tar does not have the sha256 named in build.sh"
			return 1
		}
		log "$name: the module proxy does not serve it; unpacking $tar"
		rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
		tar -xzf "$tar" -C "$dir.tmp" --strip-components=1
		mv "$dir.tmp" "$dir"
	fi
	echo "$dir"
}

# nv-ipam (github.com/Mellanox/nvidia-k8s-ipam): its three commands and its deploy/ tree. The
# commit is named here and nowhere else (the image tag and the manifests follow it).
nvipam_commit=3ce4a34ced9636f1589c891b609c2ffd565ee5b2
nvipam=$(upstream_src "nvidia-k8s-ipam-${nvipam_commit:0:7}" github.com/Mellanox/nvidia-k8s-ipam "$nvipam_commit" \
	"$repo/../shared/upstream/nvidia-k8s-ipam-${nvipam_commit:0:7}.tar.gz" \
	ab19588c870efb44f9da6596687be37f15bd1020bf8c7e4b69dabfd748008789)
want=$(cat "$nvipam/go.mod" "$nvipam/go.sum" | sha256sum | cut -c1-16)-$nvipam_commit-$("$go" env GOVERSION)
if [[ ! -x $bin/ipam-controller || ! -x $bin/ipam-node || ! -x $bin/nv-ipam ||
	$(cat "$bin/.stamp-nv-ipam" 2>/dev/null) != "$want" ]]; then
	log "building nv-ipam (ipam-controller, ipam-node, nv-ipam) at ${nvipam_commit:0:7} with $("$go" env GOVERSION)"
	start=$SECONDS
	(cd "$nvipam" && "$go" build -trimpath -o "$bin/" -ldflags "-s -w \
		-X github.com/Mellanox/nvidia-k8s-ipam/pkg/version.commit=$nvipam_commit \
		-X github.com/Mellanox/nvidia-k8s-ipam/pkg/version.gitTreeState=clean" \
		./cmd/ipam-controller ./cmd/ipam-node ./cmd/nv-ipam)
	log "built nv-ipam in $((SECONDS - start))s"
	echo "$want" >"$bin/.stamp-nv-ipam"
fi
# Its deploy/ tree for tests/k8s/manifests/nv-ipam (kustomize: namespace and image).
rm -rf "$cache/manifests/nv-ipam" && mkdir -p "$cache/manifests/nv-ipam"
cp -r "$nvipam/deploy" "$cache/manifests/nv-ipam/"
chmod -R u+w "$cache/manifests/nv-ipam"
cp "$here/manifests/nv-ipam/kustomization.yaml" "$cache/manifests/nv-ipam/"
sed -i "s/@NVIPAM_TAG@/${nvipam_commit:0:7}/" "$cache/manifests/nv-ipam/kustomization.yaml"

# The SR-IOV network device plugin as the NVIDIA Network Operator ships it (the Mellanox fork;
# its go.mod keeps the k8snetworkplumbingwg module path, so a proxy serves the fork's commit under
# that path only if that repository has it too; else the tarball): cmd/sriovdp and its
# deployments/ DaemonSet. The fork's tag is named here and nowhere else (the image tag follows it).
sriovdp_tag=network-operator-v26.7.0-rc.2
sriovdp=$(upstream_src "sriov-network-device-plugin-$sriovdp_tag" \
	github.com/k8snetworkplumbingwg/sriov-network-device-plugin 8a1884c041f1f798a89c59c7e9c332d905b2b168 \
	"$repo/../shared/upstream/sriov-network-device-plugin-$sriovdp_tag.tar.gz" \
	835d3af3055e178109ae758bc5299836d356e64c4874e8d866e8faa15c823459)
want=$(cat "$sriovdp/go.mod" "$sriovdp/go.sum" | sha256sum | cut -c1-16)-$sriovdp_tag-$("$go" env GOVERSION)
if [[ ! -x $bin/sriovdp || $(cat "$bin/.stamp-sriovdp" 2>/dev/null) != "$want" ]]; then
	log "building sriovdp at $sriovdp_tag with $("$go" env GOVERSION)"
	start=$SECONDS
	(cd "$sriovdp" && "$go" build -trimpath -o "$bin/" -ldflags "-s -w" ./cmd/sriovdp)
	log "built sriovdp in $((SECONDS - start))s"
	echo "$want" >"$bin/.stamp-sriovdp"
fi
# Its DaemonSet for tests/k8s/manifests/sriovdp (kustomize: the image).
rm -rf "$cache/manifests/sriovdp" && mkdir -p "$cache/manifests/sriovdp"
cp "$sriovdp/deployments/sriovdp-daemonset.yaml" "$here/manifests/sriovdp/kustomization.yaml" "$cache/manifests/sriovdp/"
chmod -R u+w "$cache/manifests/sriovdp"
sed -i "s/@SRIOVDP_TAG@/$sriovdp_tag/" "$cache/manifests/sriovdp/kustomization.yaml"

# --- images ---
builder=${IMAGE_BUILDER:-podman}
# save_image localhost/REPO:TAG: into the registry folder's OCI layout of REPO, under TAG (a
# manifest that TAG named before stays in the layout, untagged).
save_image() {
	local ref=${1#localhost/}
	"$builder" push -q "$1" "oci:$images/${ref%:*}:${ref##*:}"
}

# build_image NAME CONTAINERFILE CONTEXT: when the context or the Containerfile changed.
build_image() {
	local name=$1 file=$2 ctx=$3 want stamp
	stamp=$images/.stamp-$(tr '/:' '__' <<<"$name")
	want=$( (cat "$file" && cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
	if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return 0; fi
	log "image $name"
	"$builder" build -q -f "$file" -t "$name" "$ctx" >/dev/null
	save_image "$name"
	echo "$want" >"$stamp"
}

ctx=$cache/ctx
rm -rf "$ctx" && mkdir -p "$ctx"/{pause,multus/tmp,multus-thick/{tmp,etc,var},testpod}
cc -static -Os -s -o "$ctx/pause/pause" "$here/images/pause.c"
build_image localhost/pause:roce-ipvlan "$here/images/Containerfile.pause" "$ctx/pause"

cp "$bin"/{multus,thin_entrypoint,install_multus} "$ctx/multus/"
cp "$bin/passthru-cni" "$ctx/multus/passthru" # install_multus copies it to the node too
build_image localhost/multus-cni:v4.2.3-thin "$here/images/Containerfile.multus" "$ctx/multus"
cp "$bin"/{multus-daemon,multus-shim,install_multus} "$ctx/multus-thick/"
cp "$bin/passthru-cni" "$ctx/multus-thick/passthru"
# The daemon refuses to start unless os/user names its uid (user.Current, without cgo: /etc/passwd),
# and opens the sandboxes' network namespaces by the path the runtime gives, /var/run/netns/...
# (its DaemonSet mounts the node's /run/netns; the upstream image's Debian has /var/run -> /run).
echo 'root:x:0:0:root:/root:/sbin/nologin' >"$ctx/multus-thick/etc/passwd"
ln -s /run "$ctx/multus-thick/var/run"
build_image localhost/multus-cni:v4.2.3-thick "$here/images/Containerfile.multus-thick" "$ctx/multus-thick"

mkdir -p "$ctx/nv-ipam/root/var/log" "$ctx/nv-ipam/root/tmp"
chmod 1777 "$ctx/nv-ipam/root/tmp"
cp "$bin"/{ipam-controller,ipam-node,nv-ipam} "$ctx/nv-ipam/"
build_image "localhost/nvidia-k8s-ipam:${nvipam_commit:0:7}" "$here/images/Containerfile.nv-ipam" "$ctx/nv-ipam"

# sriovdp finds the PCI functions through ghw, which names vendors and products from pci.ids
# (Debian's pci.ids; its upstream image takes Alpine's hwdata-pci, at the same path).
mkdir -p "$ctx/sriovdp"
cp "$bin/sriovdp" /usr/share/misc/pci.ids "$ctx/sriovdp/"
build_image "localhost/sriov-network-device-plugin:$sriovdp_tag" "$here/images/Containerfile.sriovdp" "$ctx/sriovdp"

# The installer image: the shipped static binaries, built by `make image` (which rebuilds it when
# the sources changed) under the name the node's kustomization gives it.
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
installer=${ROCE_IPVLAN_IMAGE:-localhost/roce-ipvlan:$version}
# Its own build context: `make test` runs image-test (another `make image`) at the same time.
make -s -C "$repo" image IMAGE="$installer" IMAGE_CONTEXT=target/image/k8s-node >"$cache/image.log" 2>&1 || {
	cat "$cache/image.log" >&2
	exit 1
}
static=$(make -s --no-print-directory -C "$repo" static-bin)
# The image's second binary (the DaemonSet's annotate container) is built beside the plugin.
annotate=${static%/*}/roce-ipvlan-annotate
want=$(cat "$repo/$static" "$repo/$annotate" | sha256sum | cut -c1-16)
stamp=$images/.stamp-installer
if [[ ! -f $stamp || $(cat "$stamp") != "$want $installer" ]]; then
	save_image "$installer"
	echo "$want $installer" >"$stamp"
fi

# A changed installer image for the rollout test (suite/10-install.sh): the same binary with a
# marker appended (an ELF file ignores trailing bytes), so the installed file must change.
mkdir -p "$ctx/rollout"
{ cat "$repo/$static" && printf '\n%s\n' 'roce-ipvlan rollout test'; } >"$ctx/rollout/roce-ipvlan"
chmod 0755 "$ctx/rollout/roce-ipvlan"
cp "$repo/$annotate" "$ctx/rollout/roce-ipvlan-annotate"
build_image "${installer%:*}:rollout" "$repo/deploy/Containerfile" "$ctx/rollout"

# The test-pod root: debootstrap of Debian's packages, cached as a tar by its package list.
pkgs=iproute2,ibverbs-utils,ibverbs-providers,perftest,iputils-ping,ucx-utils,rdmacm-utils,procps
rootfs=$cache/testpod-rootfs.tar
if [[ ! -f $rootfs || $(cat "$rootfs.stamp" 2>/dev/null) != "$pkgs" ]]; then
	log "debootstrap of the test-pod root ($pkgs)"
	d=$(mktemp -d "$cache/rootfs.XXXXXX")
	debootstrap --variant=minbase --include="$pkgs" bookworm "$d" http://deb.debian.org/debian >&2
	rm -rf "$d"/var/cache/apt/archives/*.deb "$d"/var/lib/apt/lists/* "$d"/usr/share/{doc,man,locale,info}/*
	tar -C "$d" -cf "$rootfs.tmp" . && mv "$rootfs.tmp" "$rootfs"
	rm -rf "$d"
	echo "$pkgs" >"$rootfs.stamp"
fi
ln "$rootfs" "$ctx/testpod/rootfs.tar" 2>/dev/null || cp "$rootfs" "$ctx/testpod/rootfs.tar"
cp "$repo/$static" "$ctx/testpod/roce-ipvlan"
build_image localhost/roce-ipvlan-testpod:latest "$here/images/Containerfile.testpod" "$ctx/testpod"
rm -rf "$ctx"
echo "$cache"
