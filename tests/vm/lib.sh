# shellcheck shell=bash
# Helpers for code running inside the test VM (sourced; bash). Nothing here runs on the host.
#
#   vm_setup            modules, rails, rxe devices, CNI bin dir (guest.sh calls it once)
#   rail_rdma_dev NAME  the rxe device on a rail
#   cni_exec CMD CONF NETNS [IFNAME] [CONTAINER_ID]
#                       run a plugin binary directly, the config on stdin; prints raw stdout
#   cnidriver ...       the libcni driver (tests/cnidriver), on PATH; CNI_PATH already set
#   nap SECS            sleep without starting a process, for polling loops

# Rail names in NIC order; run.sh passes the same lists it used to create the NICs.
VM_RAILS=${VM_RAILS-rdma0 rdma1 rdma2 rdma3 ens1f0np0}
VM_BARE_NICS=${VM_BARE_NICS-ens2f0np0}
VM_MAC_BASE=${VM_MAC_BASE:-52:54:00:0a:00}
export CNI_BIN_DIR=/run/cni/bin CNI_PATH=/run/cni/bin

# shellcheck source=../nap.sh
source "${BASH_SOURCE[0]%/*}/../nap.sh"

vm_modules() {
	# crc32_generic: rxe computes the RoCE ICRC with the kernel crypto API and nothing pulls
	# the generic crc32 in on its own, so 'rdma link add ... type rxe' fails without it.
	# Newer kernels (7.x) have no crc32_generic: rxe calls the crc32 library directly there.
	modprobe -a virtio_net rdma_rxe ib_uverbs ipvlan
	if modinfo crc32_generic >/dev/null 2>&1; then modprobe crc32_generic; fi
	vm_check_rdma_view
}

vm_check_rdma_view() {
	# The OFED-view ib_core is built out of tree (taint O, as DKMS builds of DOCA-OFED are);
	# the kernel's own is not. A test must never run on another view than the one asked for.
	local taint
	taint=$(cat /sys/module/ib_core/taint)
	local want=upstream
	[[ $taint == *O* ]] && want=ofed
	[[ ${VM_RDMA:-upstream} == "$want" ]] ||
		{ echo "vm: VM_RDMA=${VM_RDMA:-upstream} but ib_core's taint is '$taint' (the $want view)" >&2; return 1; }
}

vm_nic_by_index() { # print the netdev whose MAC says "NIC number $1" (see run.sh)
	vm_nic_by_mac "$(printf '%s:%02x' "$VM_MAC_BASE" "$1")"
}

vm_nic_by_mac() {
	local dev
	for dev in /sys/class/net/*; do
		[[ $(cat "$dev/address") == "$1" ]] && { basename "$dev"; return 0; }
	done
	return 1
}

vm_rails() {
	local i=0 name dev
	for name in $VM_RAILS $VM_BARE_NICS; do
		# virtio_net probes asynchronously; give each NIC a moment to show up.
		for _ in $(seq 50); do dev=$(vm_nic_by_index "$i") && break; sleep 0.1; done
		[[ -n ${dev:-} ]] || { echo "vm: NIC $i ($name) not found" >&2; return 1; }
		[[ $dev == "$name" ]] || ip link set dev "$dev" name "$name"
		ip link set dev "$name" up
		dev=
		i=$((i + 1))
	done
	# The peer NIC of rail i (same QEMU hub) becomes peer<i>; tests move it where they need it.
	local -a rails
	read -r -a rails <<<"$VM_RAILS"
	i=0
	for name in "${rails[@]:0:${VM_PEERS:-${#rails[@]}}}"; do
		for _ in $(seq 50); do dev=$(vm_nic_by_mac "$(printf '52:54:00:0b:00:%02x' "$i")") && break; sleep 0.1; done
		[[ -n ${dev:-} ]] || { echo "vm: peer NIC of $name not found" >&2; return 1; }
		[[ $dev == "peer$i" ]] || ip link set dev "$dev" name "peer$i"
		dev=
		i=$((i + 1))
	done
	i=0
	for name in $VM_RAILS; do
		rdma link add "rxe$i" type rxe netdev "$name"
		i=$((i + 1))
	done
}

vm_cni_bin_dir() {
	# The host root is read-only underneath the overlay; a tmpfs dir keeps the test's
	# plugin set explicit: Debian's reference plugins plus roce-ipvlan when it was built.
	mkdir -p "$CNI_BIN_DIR"
	ln -sf /usr/lib/cni/* "$CNI_BIN_DIR/"
	if [[ -x ${ROCE_IPVLAN_BIN:-} ]]; then
		ln -sf "$ROCE_IPVLAN_BIN" "$CNI_BIN_DIR/roce-ipvlan"
	fi
}

vm_setup() {
	ip link set lo up
	vm_modules
	vm_rails
	vm_cni_bin_dir
	mkdir -p /var/lib/cni /etc/cni/net.d
	# On PATH for commands run by guest.sh and for vm-shell (functions do not survive exec).
	ln -sf "$CNIDRIVER" /usr/local/bin/cnidriver
}

rail_rdma_dev() { # rail_rdma_dev NETDEV -> rxeN (empty, status 1 when the rail has none)
	rdma link show | awk -v nd="$1" '$0 ~ (" netdev " nd "( |$)") {split($2, a, "/"); print a[1]; f=1} END {exit !f}'
}

cni_exec() { # cni_exec ADD|CHECK|DEL CONF NETNS [IFNAME] [CONTAINER_ID]
	# Runs the plugin named by the config's "type" the way a runtime would, so the test sees
	# the raw stdout (libcni drops extension keys like "roce") and can use cniVersion 1.1.0.
	local cmd=$1 conf=$2 netns=$3 ifname=${4:-net1} cid=${5:-direct-$(basename "$3")} type
	type=$(jq -r .type "$conf")
	CNI_COMMAND=$cmd CNI_CONTAINERID=$cid CNI_NETNS=$netns CNI_IFNAME=$ifname \
		CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/$type" <"$conf"
}
