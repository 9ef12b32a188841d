#!/usr/bin/env bash
# Build the OFED view of the RDMA core for the kernel the VM boots, and print the root of a
# module tree (<root>/lib/modules/<ver>/) that run.sh uses in place of the kernel's own when
# VM_RDMA=ofed (docs/testing.md, "The OFED view").
#
#   tests/vm/ofed/build.sh [--rxe-nic | --upstream-core] [KDIR]
#                        KDIR: a directory printed by tests/vm/kernel.sh (default: whatever
#                        kernel.sh prints for VM_KERNEL); --rxe-nic: rdma_rxe with
#                        rxe-nic-receive.patch (the fabric's hosts; 7.x only); --upstream-core:
#                        leave the kernel's own RDMA core alone and rebuild only rdma_rxe, with
#                        that patch (VM_RDMA=upstream on the fabric)
#
# From Debian's own packages only: linux-source-<series> (the sources) and
# linux-headers-<abi> (the kbuild tree of the image kernel.sh fetched). VM_KERNEL=backports:
# the trixie-backports packages are fetched with kernel.sh's isolated apt and unpacked privately;
# their modpost and objtool need glibc 2.38, so both are rebuilt from the sources with the host's
# compiler, which is gcc-12 where the kernel's was gcc-14 (see trixie_kbuild). The RDMA core
# (drivers/infiniband/core: ib_core, ib_uverbs, ib_cm, iw_cm, rdma_cm, rdma_ucm, ib_umad) gets
# ib_core-gid-netns-check.patch, the GID namespace check of DOCA-OFED's ib_core, and is built out
# of tree; rdma_rxe (drivers/infiniband/sw/rxe) is rebuilt against the new core's symbols, and
# with --rxe-nic also patched with rxe-nic-receive.patch (7.x, whose sources have rxe_ns.c:
# Soft-RoCE receives for the GIDs of upper devices in other namespaces, as a NIC port does). The
# fabric's hosts need it, and only they get it: the one-node Kubernetes VM (2 vCPUs) stalled
# twice with it (an RCU stall, then no progress) and never without. The result is cached under
# ~/.cache/roce-ipvlan/ofed/<ver>-<hash of patches and this script>[-rxenic]/: the
# kernel's module tree hard-linked, the eight modules replaced, depmod run. A second call prints
# the cached tree at once.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${ROCE_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roce-ipvlan}
core_view=ofed rxe_nic=0
case ${1:-} in
--upstream-core) core_view=upstream rxe_nic=1 && shift ;;
--rxe-nic) rxe_nic=1 && shift ;;
esac
kdir=${1:-$("$here/../kernel.sh")}
ver=$(cat "$kdir/version")
patch=$here/ib_core-gid-netns-check.patch
rxe_patch=$here/rxe-nic-receive.patch
hash=$(cat "$patch" "$rxe_patch" "$0" | sha256sum | cut -c1-12)
out=$cache/ofed/$ver-$hash
((!rxe_nic)) || out+=-rxenic
[[ $core_view == ofed ]] || out=$cache/rxe/$ver-$hash
if [[ -f $out/done ]]; then
	echo "$out"
	exit 0
fi

# "6.1.0-57-amd64" -> series 6.1, "7.3.4+deb13-amd64" -> 7.3.
series=$(cut -d. -f1-2 <<<"${ver%%[-+]*}")
headers=/usr/src/linux-headers-$ver
source_tar=/usr/src/linux-source-$series.tar.xz

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
need_root() {
	((EUID == 0)) || { echo "ofed/build.sh: $1 (run as root, or install it: apt-get install $2)" >&2; exit 1; }
}

start=$SECONDS
mkdir -p "$cache/ofed"
tmp=$(mktemp -d "$cache/ofed/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=$tmp/src
mkdir -p "$src"
make_vars=()

# trixie_kbuild: linux-headers-<ver> (with its -common and linux-kbuild packages) and
# linux-source-<series> of trixie-backports, unpacked under $tmp/root, made usable on bookworm.
trixie_kbuild() {
	local adir=$cache/apt-trixie-backports opts deps d root=$tmp/root kb mod
	opts=(-o "Dir::Etc::SourceList=$adir/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$adir/lists" -o "Dir::Cache=$adir/cache" -o Dir::State::status=/dev/null)
	mapfile -t deps < <(apt-cache "${opts[@]}" depends "linux-headers-$ver" 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-(headers-.*-common|kbuild-)/ {print $2}')
	mkdir -p "$tmp/debs"
	chmod 777 "$tmp/debs" # apt-get download drops privileges to _apt
	echo "ofed/build.sh: fetching linux-headers-$ver ${deps[*]} linux-source-$series (trixie-backports)" >&2
	(cd "$tmp/debs" && apt-get download -q "${opts[@]}" "linux-headers-$ver" "${deps[@]}" "linux-source-$series" 2>&1 |
		{ grep -v 'unsandboxed' || true; } >&2)
	for d in "$tmp"/debs/*.deb; do dpkg-deb -x "$d" "$root"; done
	hver=$(dpkg-deb -f "$(ls "$tmp"/debs/linux-headers-"$ver"_*.deb)" Version)
	rm -rf "$tmp/debs"
	headers=$root/usr/src/linux-headers-$ver
	source_tar=$root/usr/src/linux-source-$series.tar.xz
	[[ -f $headers/Module.symvers && -f $source_tar ]] || { echo "ofed/build.sh: the trixie-backports packages are incomplete" >&2; exit 1; }
	# The headers' Makefile names /usr/src/...; the scripts/tools symlinks are relative.
	sed -i "s|/usr/src/|$root/usr/src/|g" "$headers/Makefile"
	kb=$(readlink -f "$headers/scripts")/..
	tar -xJf "$source_tar" -C "$src" --strip-components=1 "linux-source-$series/tools" \
		"linux-source-$series/scripts/mod" "linux-source-$series/scripts/include"
	# objtool, from the same sources, against bookworm's libelf.
	make -s -C "$src/tools/objtool" -j"$(nproc)" >&2
	rm -f "$kb/tools/objtool/objtool"
	cp "$src/tools/objtool/objtool" "$kb/tools/objtool/objtool"
	# modpost (Debian's scripts/mod/modpost runs modpost.real-<endianness>-<bits>) the way kbuild
	# makes it: elfconfig.h from an object of this host, devicetable-offsets.h from the headers.
	mod=$src/scripts/mod
	local common
	common=$(readlink -f "$headers/../linux-headers-${ver%-*}-common")
	ln -s "$common/include" "$src/include" # modpost's sources include ../../include/linux/*.h
	gcc -o "$mod/mk_elfconfig" "$mod/mk_elfconfig.c"
	gcc -c -o "$mod/empty.o" "$mod/empty.c"
	"$mod/mk_elfconfig" <"$mod/empty.o" >"$mod/elfconfig.h"
	gcc -nostdinc -D__KERNEL__ -O2 -S -o "$mod/offsets.s" \
		-I"$common/arch/x86/include" -I"$headers/arch/x86/include/generated" -I"$common/include" \
		-I"$headers/include" -I"$common/arch/x86/include/uapi" -I"$headers/arch/x86/include/generated/uapi" \
		-I"$common/include/uapi" -I"$headers/include/generated/uapi" \
		-include "$common/include/linux/compiler-version.h" -include "$common/include/linux/kconfig.h" \
		-include "$common/include/linux/compiler_types.h" "$mod/devicetable-offsets.c"
	sed -ne 's:^[[:space:]]*\.ascii[[:space:]]*"\(.*\)".*:\1:; /^->/{s:->#\(.*\):/* \1 */:; s:^->\([^ ]*\) [\$#]*\([-0-9]*\) \(.*\):#define \1 \2 /* \3 */:; s:->::; p;}' \
		"$mod/offsets.s" >"$mod/devicetable-offsets.h"
	rm -f "$kb/scripts/mod/modpost.real-lsb-64"
	gcc -O2 -I"$mod" -I"$src/scripts/include" -o "$kb/scripts/mod/modpost.real-lsb-64" \
		"$mod/modpost.c" "$mod/file2alias.c" "$mod/sumversion.c" "$mod/symsearch.c" -lcrypto
	# Built by gcc-14, the configuration turned on an option only gcc >= 14 has
	# (-fmin-function-alignment; kbuild falls back to -falign-functions). Everything else
	# compiles as it is with bookworm's gcc-12; CONFIG_MODVERSIONS is off, so no CRC can differ.
	sed -i '/CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT/d' "$headers/include/config/auto.conf" \
		"$headers/include/generated/autoconf.h"
	# No pahole here: without a vmlinux kbuild skips the modules' BTF instead of failing.
	rm -f "$headers/vmlinux"
	make_vars=(CC=gcc)
}

install_bookworm() {
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
}

if [[ ${VM_KERNEL:-default} == backports ]]; then
	trixie_kbuild
	# The headers and the sources are of the same upload: both are trixie-backports' candidates.
else
	# The headers of exactly this ABI, and the sources of the same Debian upload: a core built
	# from other sources than the headers' include/rdma would not match what rdma_rxe uses.
	install_bookworm
fi

tar -xJf "$source_tar" -C "$src" --strip-components=1 \
	"linux-source-$series/drivers/infiniband/core" "linux-source-$series/drivers/infiniband/sw/rxe"
core=$src/drivers/infiniband/core
rxe=$src/drivers/infiniband/sw/rxe
if [[ $core_view == ofed ]]; then
	echo "ofed/build.sh: building the OFED-view RDMA core for $ver (linux-source-$series $hver)" >&2
	patch -d "$src" -p1 --quiet --forward <"$patch"
else
	echo "ofed/build.sh: building rdma_rxe for $ver's own RDMA core (linux-source-$series $hver)" >&2
fi
rxe_patched=no
if ((rxe_nic)) && [[ -f $rxe/rxe_ns.c ]]; then
	patch -d "$src" -p1 --quiet --forward <"$rxe_patch"
	rxe_patched=yes
elif ((rxe_nic)); then
	echo "ofed/build.sh: $ver's rdma_rxe has no rxe_ns.c: rxe-nic-receive.patch is for 7.x (VM_KERNEL=backports)" >&2
	exit 1
fi
# In the kernel tree, cm_trace.h names its directory relative to include/trace/ (where
# define_trace.h includes it from); that path does not exist next to the headers package.
sed -i "s|^#define TRACE_INCLUDE_PATH \.\./\.\./drivers/infiniband/core$|#define TRACE_INCLUDE_PATH $core|" \
	"$core/cm_trace.h"

jobs=$(nproc)
# The headers ship no vmlinux, so kbuild skips the modules' BTF (and says so for each one).
quiet() { { grep -v '^Skipping BTF generation' || true; } >&2; }
rxe_symbols=()
if [[ $core_view == ofed ]]; then
	make -s -C "$headers" M="$core" -j"$jobs" "${make_vars[@]}" modules 2>&1 | quiet
	rxe_symbols=(KBUILD_EXTRA_SYMBOLS="$core/Module.symvers")
fi
make -s -C "$headers" M="$rxe" -j"$jobs" "${make_vars[@]}" "${rxe_symbols[@]}" modules 2>&1 | quiet

# The kernel's module tree, hard-linked (cheap, and the kernel cache stays untouched: every file
# replaced here is unlinked first, never written through the link).
tree=$tmp/out/lib/modules/$ver
mkdir -p "$tmp/out/lib/modules"
cp -al "$kdir/lib/modules/$ver" "$tree" 2>/dev/null || cp -a "$kdir/lib/modules/$ver" "$tree"
rm -f "$tree"/modules.*.bin "$tree"/modules.{dep,alias,symbols,softdep,devname}
# Every module of drivers/infiniband/core (7.x adds ib_uverbs_support) and rdma_rxe.
built_mods=("$rxe"/*.ko)
[[ $core_view == upstream ]] || built_mods+=("$core"/*.ko)
[[ -f $rxe/rdma_rxe.ko && ($core_view == upstream || -f $core/ib_core.ko) ]] ||
	{ echo "ofed/build.sh: the build made no ib_core.ko or rdma_rxe.ko" >&2; exit 1; }
for built in "${built_mods[@]}"; do
	m=$(basename "$built" .ko)
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
	echo "RDMA core: $core_view"
	[[ $core_view == upstream ]] || echo "patch $(sha256sum <"$patch" | cut -d' ' -f1)"
	echo "rxe-nic-receive.patch: $rxe_patched"
	echo "built in $((SECONDS - start)) s on $jobs CPUs"
} >"$tmp/out/done"
echo "ofed/build.sh: built in $((SECONDS - start)) s" >&2
rm -rf "$out"
mkdir -p "$(dirname "$out")" # cache/rxe/ for --upstream-core: the first such tree on a machine
mv "$tmp/out" "$out"
echo "$out"
