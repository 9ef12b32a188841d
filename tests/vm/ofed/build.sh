#!/usr/bin/env bash
# Build the OFED view of the RDMA core for the kernel the VM boots, and print the root of a
# module tree (<root>/lib/modules/<ver>/) that run.sh uses in place of the kernel's own when
# VM_RDMA=ofed (docs/testing.md, "The OFED view").
#
#   tests/vm/ofed/build.sh [KDIR]    KDIR: a directory printed by tests/vm/kernel.sh (default:
#                                    whatever kernel.sh prints for VM_KERNEL)
#
# From Debian's own packages only: linux-source-<series> (the sources) and
# linux-headers-<abi> (the kbuild tree of the image kernel.sh fetched). The RDMA core
# (drivers/infiniband/core: ib_core, ib_uverbs, ib_cm, iw_cm, rdma_cm, rdma_ucm, ib_umad) gets
# ib_core-gid-netns-check.patch, the GID namespace check of DOCA-OFED's ib_core, and is built out
# of tree; rdma_rxe (drivers/infiniband/sw/rxe) is rebuilt against the new core's symbols. The
# result is cached under ~/.cache/roce-ipvlan/ofed/<ver>-<hash of patch and this script>/: the
# kernel's module tree hard-linked, the eight modules replaced, depmod run. A second call prints
# the cached tree at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}
kdir=${1:-$("$here/../kernel.sh")}
ver=$(cat "$kdir/version")
patch=$here/ib_core-gid-netns-check.patch
hash=$(cat "$patch" "$0" | sha256sum | cut -c1-12)
out=$cache/ofed/$ver-$hash
if [[ -f $out/done ]]; then
	echo "$out"
	exit 0
fi

# The modules the patch touches or that link against what it touches (every module of
# drivers/infiniband/core, and the Soft-RoCE driver the VM's rails use).
core_mods=(ib_core ib_uverbs ib_cm iw_cm rdma_cm rdma_ucm ib_umad)
rxe_mods=(rdma_rxe)

# "6.1.0-57-amd64" -> series 6.1, "7.3.4+deb13-amd64" -> 7.3.
series=$(cut -d. -f1-2 <<<"${ver%%[-+]*}")
headers=/usr/src/linux-headers-$ver
source_tar=/usr/src/linux-source-$series.tar.xz

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
need_root() {
	((EUID == 0)) || { echo "ofed/build.sh: $1 (run as root, or install it: apt-get install $2)" >&2; exit 1; }
}

# The headers of exactly this ABI, and the sources of the same Debian upload: a core built from
# other sources than the headers' include/rdma would not match the structures rdma_rxe uses.
if [[ ! -f $headers/Module.symvers ]]; then
	need_root "$headers is missing" "linux-headers-$ver"
	echo "ofed/build.sh: installing linux-headers-$ver" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "linux-headers-$ver" >&2
fi
hver=$(pkg_version "linux-headers-$ver")
[[ -n $hver ]] || { echo "ofed/build.sh: linux-headers-$ver is not a dpkg package here" >&2; exit 1; }
if [[ ! -f $source_tar || $(pkg_version "linux-source-$series") != "$hver" ]]; then
	need_root "linux-source-$series $hver is missing" "linux-source-$series=$hver"
	echo "ofed/build.sh: installing linux-source-$series=$hver (the headers' version)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "linux-source-$series=$hver" >&2
fi

start=$SECONDS
mkdir -p "$cache/ofed"
tmp=$(mktemp -d "$cache/ofed/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src
mkdir -p "$src"
echo "ofed/build.sh: building the OFED-view RDMA core for $ver (linux-source-$series $hver)" >&2
tar -xJf "$source_tar" -C "$src" --strip-components=1 \
	"linux-source-$series/drivers/infiniband/core" "linux-source-$series/drivers/infiniband/sw/rxe"
patch -d "$src" -p1 --quiet --forward <"$patch"

core=$src/drivers/infiniband/core
rxe=$src/drivers/infiniband/sw/rxe
# In the kernel tree, cm_trace.h names its directory relative to include/trace/ (where
# define_trace.h includes it from); that path does not exist next to the headers package.
sed -i "s|^#define TRACE_INCLUDE_PATH \.\./\.\./drivers/infiniband/core$|#define TRACE_INCLUDE_PATH $core|" \
	"$core/cm_trace.h"

jobs=$(nproc)
# The headers ship no vmlinux, so kbuild skips the modules' BTF (and says so for each one).
quiet() { { grep -v '^Skipping BTF generation' || true; } >&2; }
make -s -C "$headers" M="$core" -j"$jobs" modules 2>&1 | quiet
make -s -C "$headers" M="$rxe" -j"$jobs" KBUILD_EXTRA_SYMBOLS="$core/Module.symvers" modules 2>&1 | quiet

# The kernel's module tree, hard-linked (cheap, and the kernel cache stays untouched: every file
# replaced here is unlinked first, never written through the link).
tree=$tmp/out/lib/modules/$ver
mkdir -p "$tmp/out/lib/modules"
cp -al "$kdir/lib/modules/$ver" "$tree" 2>/dev/null || cp -a "$kdir/lib/modules/$ver" "$tree"
rm -f "$tree"/modules.*.bin "$tree"/modules.{dep,alias,symbols,softdep,devname}
for m in "${core_mods[@]}" "${rxe_mods[@]}"; do
	built=$core/$m.ko
	[[ -f $built ]] || built=$rxe/$m.ko
	[[ -f $built ]] || { echo "ofed/build.sh: the build made no $m.ko" >&2; exit 1; }
	stock=$(find "$tree/kernel/drivers/infiniband" -name "$m.ko*" | head -n1)
	[[ -n $stock ]] || { echo "ofed/build.sh: $ver has no stock $m module to replace" >&2; exit 1; }
	rm -f "$stock"
	# Debian ships its modules without debug info; so do we (smaller, faster over 9p).
	strip --strip-debug -o "${stock%.ko*}.ko" "$built"
done
depmod -b "$tmp/out" "$ver"
{
	echo "kernel $ver"
	echo "linux-source-$series $hver"
	echo "patch $(sha256sum <"$patch" | cut -d' ' -f1)"
	echo "built in $((SECONDS - start)) s on $jobs CPUs"
} >"$tmp/out/done"
echo "ofed/build.sh: built in $((SECONDS - start)) s" >&2
rm -rf "$out"
mv "$tmp/out" "$out"
echo "$out"
