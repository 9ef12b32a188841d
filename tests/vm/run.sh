#!/usr/bin/env bash
# Boot Debian's stock kernel under QEMU (TCG) with the host's root as the VM's root, set up the
# Soft-RoCE rails, run one command inside, print its output and exit with its exit status.
#
#   tests/vm/run.sh [--interactive] [--] COMMAND [ARGS...]   (COMMAND runs inside the VM)
#
# Environment:
#   ROCE_IPVLAN_BIN  plugin binary (default: <repo>/target/debug/roce-ipvlan)
#   VM_TIMEOUT       seconds before the VM is killed (default 1200)
#   VM_MEM, VM_SMP   guest memory in MiB (1024) and CPUs (2)
#   VM_RAILS         names of the Soft-RoCE rails, in NIC order (see lib.sh for the default)
#   VM_BARE_NICS     names of extra NICs that get no RDMA device
#   VM_PEERS         how many rails (the first N) get a peer NIC (default: all); QEMU's PCI bus
#                    has 32 slots, so 16 rails fit only with few peers (make bench uses 4)
#   VM_KERNEL        default (bookworm, 6.1) or backports (trixie-backports, 7.x); see kernel.sh
#   VM_RDMA          upstream (default): the kernel's own RDMA core; ofed: the same kernel with
#                    the RDMA core patched to hide other namespaces' GIDs as DOCA-OFED's does,
#                    built and cached by ofed/build.sh (docs/testing.md, "The OFED view")
#   VM_KEEP_PATHS    host folders under /tmp, /var/tmp or /run that the command needs (the VM
#                    mounts fresh tmpfs there and binds back only the paths it is told about)
# For a VM that is one host of several (tests/fabric/run.sh sets these):
#   VM_NAME          a name for this run's messages (default: none)
#   VM_MAC_BASE      the first five bytes of the NICs' MACs (default 52:54:00:0a:00); NIC i
#                    gets VM_MAC_BASE:i, and lib.sh names it by that
#   VM_NETDEVS       one QEMU -netdev backend per NIC (rails, then bare NICs), space-separated,
#                    e.g. "socket,udp=127.0.0.1:P,localaddr=127.0.0.1:Q ...", instead of a hub
#                    each; needs VM_PEERS=0
#   VM_FABRIC_SHARE  a host folder the VM mounts writable at /run/fabric (shared between hosts)
#   VM_RXE           nic: an rdma_rxe that receives for the GIDs of upper devices in other
#                    namespaces, as a NIC port does (ofed/rxe-nic-receive.patch; 7.x kernels).
#                    With VM_RDMA=ofed the OFED-view tree gets it (ofed/build.sh --rxe-nic), with
#                    upstream rdma_rxe alone is rebuilt with it. The fabric's hosts run it
#   CONC_PODS, CONC_ROUNDS  the size of 80-concurrency.sh (32 pods, 2 rounds), passed into the VM
#   SUITE_EXPECT     the fewest tests the suite in the VM must run (tests/suite-runner.sh)
#   SUITE_FILES      an ERE: the suite runs only its files whose name matches (a shard)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
interactive=0
if [[ ${1:-} == --interactive ]]; then interactive=1; shift; fi
[[ ${1:-} == -- ]] && shift
(($# > 0)) || { echo "usage: $0 [--interactive] [--] COMMAND [ARGS...]" >&2; exit 2; }

# Rail names are realistic on purpose: four rdmaN rails plus one named like a ConnectX port, so
# nothing in the plugin may assume the rdmaN pattern. The bare NIC has no rxe device (error 104).
rails=${VM_RAILS-rdma0 rdma1 rdma2 rdma3 ens1f0np0}
bare=${VM_BARE_NICS-ens2f0np0}
mac_base=${VM_MAC_BASE:-52:54:00:0a:00}
read -r -a rail_list <<<"$rails"
peers=${VM_PEERS:-${#rail_list[@]}}
plugin=${ROCE_IPVLAN_BIN:-$repo/target/debug/roce-ipvlan}
[[ $plugin == /* ]] || plugin=$PWD/$plugin

kdir=$("$here/kernel.sh")
kver=$(cat "$kdir/version")
# The module tree the VM uses: the kernel's own, or a copy with the OFED-view RDMA core in it.
rdma=${VM_RDMA:-upstream}
case $rdma in
upstream)
	mroot=$kdir
	[[ ${VM_RXE:-} != nic ]] || mroot=$("$here/ofed/build.sh" --upstream-core "$kdir")
	;;
ofed)
	rxe_nic=()
	[[ ${VM_RXE:-} != nic ]] || rxe_nic=(--rxe-nic)
	mroot=$("$here/ofed/build.sh" "${rxe_nic[@]}" "$kdir")
	;;
*) echo "run.sh${VM_NAME:+[$VM_NAME]}: VM_RDMA must be 'upstream' or 'ofed', not '$rdma'" >&2; exit 2 ;;
esac
cnidriver=$("$repo/tests/cnidriver/build.sh")

work=$(mktemp -d "${TMPDIR:-/tmp}/roce-vm.XXXXXX")
share=$work/share
mkdir -p "$share"
# shellcheck disable=SC2317 # called by the EXIT trap; 0.9 misreads it as unreachable (koalaman/shellcheck#2660)
cleanup() {
	[[ -n ${tailpid:-} ]] && kill "$tailpid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# --- initramfs: static busybox, /init, and the modules needed to reach the host root. ---
ird=$work/initramfs
mkdir -p "$ird"/{bin,sbin,proc,sys,dev,lower,upper,newroot,modules}
cp /bin/busybox "$ird/bin/busybox"
for applet in sh mount umount insmod mkdir switch_root cp poweroff cat echo grep; do
	ln -s busybox "$ird/bin/$applet"
done
install -m 0755 "$here/init" "$ird/init"
install -m 0755 "$here/pid1" "$ird/pid1"
mdir=$mroot/lib/modules/$kver
: >"$ird/modules.load"
for want in virtio_pci 9pnet_virtio 9p overlay; do
	line=$(grep -E "/$want\.ko(\.[a-z]+)?:" "$mdir/modules.dep") || {
		grep -qE "/$want\.ko" "$mdir/modules.builtin" && continue # built in: nothing to load
		echo "run.sh${VM_NAME:+[$VM_NAME]}: module $want not found in $mdir" >&2
		exit 1
	}
	# modules.dep lists the full dependency closure; load it right to left, then the module.
	read -r -a deps <<<"${line#*:}"
	for ((i = ${#deps[@]} - 1; i >= -1; i--)); do
		m=${line%%:*}
		((i >= 0)) && m=${deps[i]}
		b=$(basename "$m")
		# Compressed modules (.ko.xz on 7.x kernels) are unpacked here: busybox's insmod
		# hands the file to init_module as it is.
		case $b in
		*.xz) unpack=(xz -dc) ;; *.zst) unpack=(zstd -dcq) ;; *.gz) unpack=(gzip -dc) ;; *) unpack=(cat) ;;
		esac
		b=${b%.ko*}.ko
		grep -qxF "$b" "$ird/modules.load" && continue
		"${unpack[@]}" "$mdir/$m" >"$ird/modules/$b"
		echo "$b" >>"$ird/modules.load"
	done
done
(cd "$ird" && find . | cpio -o -H newc --quiet) >"$work/initramfs.cpio"

# --- what the VM runs: boot.sh in the share, sourced by /init inside the chroot. ---
{
	echo "export ROCE_REPO=$(printf %q "$repo") ROCE_MODROOT=$(printf %q "$mroot") ROCE_KVER=$kver VM_RDMA=$rdma"
	echo "export ROCE_IPVLAN_BIN=$(printf %q "$plugin") CNIDRIVER=$(printf %q "$cnidriver")"
	echo "export VM_RAILS=$(printf %q "$rails") VM_BARE_NICS=$(printf %q "$bare") VM_VERBOSE=$(printf %q "${VM_VERBOSE:-}") VM_PEERS=$peers"
	echo "export VM_MAC_BASE=$mac_base VM_NAME=$(printf %q "${VM_NAME:-}")"
	# The concurrency suite's size (80-concurrency.sh), the suite runner's count and shard, and
	# the k8s node's sriovdp selectors (tests/k8s/lib.sh, install_sriovdp) and its node count.
	for v in CONC_PODS CONC_ROUNDS SUITE_EXPECT SUITE_FILES K8S_SRIOVDP_SELECTORS K8S_NODES; do [[ -n ${!v:-} ]] && echo "export $v=$(printf %q "${!v}")"; done
	printf 'cd %q\n' "$repo"
	printf 'exec bash %q' "$here/guest.sh"
	printf ' %q' "$@"
	((interactive)) || printf ' >/run/vmshare/output.log 2>&1'
	echo
} >"$share/boot.sh"

# The VM mounts fresh tmpfs on /tmp, /var/tmp and /run (host contents there would only confuse
# the tests). Host paths the run needs that live below them (a clone in /tmp, say) are listed
# here, and /init bind-mounts them back from the host root.
# VM_KEEP_PATHS adds more (space-separated; tests/k8s/run.sh passes its script's folder).
# shellcheck disable=SC2086 # a list of paths
for p in "$repo" "$kdir" "$mroot" "$(dirname "$plugin")" "$(dirname "$cnidriver")" ${VM_KEEP_PATHS:-}; do
	case $p in /tmp/* | /var/tmp/* | /run/*) echo "$p" ;; esac
done >"$share/keep-paths"
# Writable shares besides /run/vmshare, as "TAG MOUNTPOINT" lines for /init.
shares=()
if [[ -n ${VM_FABRIC_SHARE:-} ]]; then
	echo "fabric /run/fabric" >"$share/extra-shares"
	shares=(-virtfs "local,path=$VM_FABRIC_SHARE,mount_tag=fabric,security_model=none,multidevs=remap")
fi

# --- QEMU: one virtio-net NIC per rail, each on its own hub (= its own L2 segment). ---
# lib.sh finds NIC number i by this MAC scheme to give it its rail name. romfile= drops the
# iPXE option ROM: nothing network-boots, and under TCG it costs boot time.
read -r -a netdevs <<<"${VM_NETDEVS:-}"
nics=()
i=0
for _ in $rails $bare; do
	mac=$(printf '%s:%02x' "$mac_base" "$i")
	backend="hubport,id=n$i,hubid=$i"
	if ((${#netdevs[@]})); then
		[[ -n ${netdevs[i]:-} ]] || { echo "run.sh${VM_NAME:+[$VM_NAME]}: VM_NETDEVS names no backend for NIC $i" >&2; exit 2; }
		backend="${netdevs[i]},id=n$i"
	fi
	nics+=(-netdev "$backend" -device "virtio-net-pci,netdev=n$i,mac=$mac,romfile=")
	i=$((i + 1))
done
# A second NIC on each rail's hub: the other end of the rail's L2 segment (a rail router with
# radvd, or a peer node), named peerN in the VM and left down in the initial namespace.
j=0
for _ in "${rail_list[@]:0:peers}"; do
	mac=$(printf '52:54:00:0b:00:%02x' "$j")
	nics+=(-netdev "hubport,id=p$j,hubid=$j" -device "virtio-net-pci,netdev=p$j,mac=$mac,romfile=")
	j=$((j + 1))
done

# damon_stat off: the 7.x kernel starts DAMON_STAT's kdamond by default, a sampler of the whole
# memory's page accesses that costs a TCG guest about 2 % of its CPUs (measured on the k8s node).
append="console=ttyS0 panic=-1 loglevel=4 damon_stat.enabled=N"
if ((interactive)); then
	append+=" roce_vm.interactive"
	console=(-nographic -serial mon:stdio)
else
	# -enable-kvm hangs on the build machines; TCG is slower but always works.
	console=(-display none -serial "file:$work/console.log" -monitor none)
fi

# One kernel panic gets one more boot, the known fault of multi-threaded TCG: a vCPU runs a
# breakpoint that the kernel's text patching (static keys, alternatives) had already replaced;
# the oops says "int3" and its RIP is one byte into the patched instruction (early boot: int3
# in sched_clock_cpu; CI, 67 s into the k8s tier: "Code: ... e9 <6a> 18 00 00" in
# get_page_from_freelist). Before guest.sh's "started" mark nothing has run, so the second boot
# repeats nothing. After it, only a VM of its own boots again (no VM_NETDEVS: a fabric host is
# linked to others, which a second run would meet changed) and runs the command again from the
# start on a fresh guest. Any other panic, early or late, fails with its trace: a retry would
# hide a kernel bug the tests hit. The oops must be the int3 one ("int3: 0000 [#1]" on 6.1,
# "Oops: int3: 0000 [#1]" since 6.9): the "Code: ... e9 <..>" bytes alone also fit a general
# protection fault or a page fault right after a jump, which is not this fault.
stale_breakpoint() {
	grep -qE '(^|[] ])(Oops: )?int3: [0-9a-f]{4} \[#[0-9]+\]' "$work/console.log"
}
for attempt in 1 2; do
rm -f "$share/exit-code" "$share/output.log" "$share/started" "$work/console.log"
start=$(date +%s)
set +e
if ((!interactive)); then
	touch "$share/output.log"
	tail -n +1 -F "$share/output.log" 2>/dev/null &
	tailpid=$!
fi
timeout -k 10 "${VM_TIMEOUT:-1200}" qemu-system-x86_64 \
	-accel tcg -M pc -cpu max -m "${VM_MEM:-1024}" -smp "${VM_SMP:-2}" \
	-nodefaults -no-reboot "${console[@]}" \
	-kernel "$kdir/vmlinux" -initrd "$work/initramfs.cpio" -append "$append" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-virtfs "local,path=$share,mount_tag=vmshare,security_model=none,multidevs=remap" \
	"${shares[@]}" "${nics[@]}" 2> >(grep -v 'is not connected to host network' >&2)
qemu_rc=$?
set -e
sleep 0.3 # let tail print the last lines
if [[ -n ${tailpid:-} ]]; then
	kill "$tailpid" 2>/dev/null || true
	wait "$tailpid" 2>/dev/null || true
	tailpid=
fi

secs=$(($(date +%s) - start))
if ((!interactive)) && [[ ! -s $share/exit-code ]] && grep -q 'Kernel panic' "$work/console.log" 2>/dev/null; then
	if ((attempt == 1)) && stale_breakpoint && { [[ ! -e $share/started ]] || [[ -z ${VM_NETDEVS:-} ]]; }; then
		if [[ ! -e $share/started ]]; then
			echo "run.sh${VM_NAME:+[$VM_NAME]}: the guest kernel panicked in early boot after ${secs}s (before the command started) on a breakpoint its text patching had already removed (a fault of multi-threaded TCG); booting once more. The oops:" >&2
		else
			echo "run.sh${VM_NAME:+[$VM_NAME]}: the guest kernel panicked after ${secs}s, while the command ran, on a breakpoint its text patching had already removed (a fault of multi-threaded TCG, not of the test); booting once more, the command runs again from the start. The oops:" >&2
		fi
		awk '/(Oops|RIP:|Code:)/' "$work/console.log" | head -n 6 >&2
		echo "run.sh${VM_NAME:+[$VM_NAME]}: --- second boot ---" >&2
		continue
	fi
	echo "run.sh${VM_NAME:+[$VM_NAME]}: the guest kernel panicked after ${secs}s$([[ -e $share/started ]] && echo ", while the command ran"); not retried. The trace:" >&2
	awk '/(BUG:|Oops|general protection|WARNING:|Call Trace|RIP:)/ && !seen {seen = 1} seen' "$work/console.log" |
		grep -B80 -m1 'Kernel panic' | tail -n 80 >&2
	exit 1
fi
break
done
if [[ ! -s $share/exit-code ]]; then
	echo "run.sh${VM_NAME:+[$VM_NAME]}: the VM produced no exit code (qemu exit $qemu_rc after ${secs}s; 124 = timeout)" >&2
	[[ -f $work/console.log ]] && { echo "--- last console lines ---" >&2; tail -n 40 "$work/console.log" >&2; }
	exit 1
fi
rc=$(cat "$share/exit-code")
echo "run.sh${VM_NAME:+[$VM_NAME]}: VM finished in ${secs}s, exit code $rc" >&2
exit "$rc"
