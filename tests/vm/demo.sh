#!/usr/bin/env bash
# make demo: inside the VM, on the OFED view of the RDMA core (VM_RDMA=ofed: other namespaces'
# GIDs hidden, as DOCA-OFED's ib_core does), show a pod with the RDMA devices but no netdev on a
# rail reading zero GIDs; then attach it to four Soft-RoCE rails through libcni (roce-ipvlan,
# host-local, one flat subnet as on A100 nodes), show that it reads its own GIDs at the reported
# indexes, then detach it and show that nothing is left. Runs on the upstream view too, where
# the first step shows no symptom.
set -euo pipefail
source "$ROCE_REPO/tests/vm/lib.sh"

rails=(rdma0 rdma1 rdma2 rdma3)
pod=demo-pod
netns=/run/netns/$pod
problems=() # things that look wrong; reported at the end so the demo still shows everything
heading() { printf '\n== %s ==\n' "$*"; }
in_pod() { ip netns exec "$pod" "$@"; }

[[ -x $CNI_BIN_DIR/roce-ipvlan ]] || {
	echo "demo: roce-ipvlan not found at ${ROCE_IPVLAN_BIN:-?}; run 'make build'" >&2
	exit 1
}

heading "Node: $(uname -r), Soft-RoCE rails"
rdma link show
zero=0000:0000:0000:0000:0000:0000:0000:0000
taint=$(cat /sys/module/ib_core/taint)
echo "RDMA core: VM_RDMA=${VM_RDMA:-upstream} (ib_core taint '${taint}': ${taint:+out-of-tree, }$([[ ${VM_RDMA:-} == ofed ]] &&
	echo "patched with the GID namespace check of DOCA-OFED" || echo "the kernel's own"))"

# The node's own addresses on the rails, as on the field report's nodes: GIDs of the host.
for i in "${!rails[@]}"; do ip addr add "10.8.$i.1/24" dev "${rails[i]}"; done
sleep 1 # the kernel adds a GID from a work item

ip netns add "$pod"
in_pod ip link set lo up

heading "Before roce-ipvlan: the pod has the RDMA devices, but no netdev on a rail"
dev=$(rail_rdma_dev "${rails[0]}")
base=/sys/class/infiniband/$dev/ports/1
for n in 0 1; do
	printf 'host: %s/1 [%s] %s  %s ndev=%s\n' "$dev" "$n" "$(cat "$base/gids/$n")" \
		"$(cat "$base/gid_attrs/types/$n")" "$(cat "$base/gid_attrs/ndevs/$n")"
done
for n in 0 1; do
	printf 'pod:  %s/1 [%s] %s  ' "$dev" "$n" "$(in_pod cat "$base/gids/$n")"
	# On the OFED view the read fails (EINVAL): show the error as the field report does.
	{ in_pod cat "$base/gid_attrs/types/$n" 2>&1 || true; } | tr '\n' ' '
	echo
done
echo "pod:  ibv_devinfo -v -d $dev (the query ioctl, not filtered):"
in_pod ibv_devinfo -v -d "$dev" | grep -E 'GID\[ *[01]\]' || true
if [[ ${VM_RDMA:-} == ofed ]]; then
	[[ $(in_pod cat "$base/gids/1") == "$zero" ]] || problems+=("the pod reads the host's GID on $dev: not the OFED view")
	echo "-> every GID reads zero in the pod, and verbs that address from them fail (ENODEV)"
else
	echo "-> upstream view: the pod reads the host's GIDs; run 'make demo' for the OFED view"
fi
for i in "${!rails[@]}"; do
	jq -n --arg rail "${rails[i]}" '{cniVersion: "1.0.0", name: "demo-rails", type: "roce-ipvlan",
		master: $rail, mode: "l2", ipam: {type: "host-local", subnet: "10.9.0.0/16",
		rangeStart: "10.9.0.10", rangeEnd: "10.9.0.99"}}' >"/tmp/demo-$i.conf"
done

heading "ADD through libcni: one IPvlan L2 child per rail"
printf '%-7s %-6s %-14s %-6s %-4s %-9s %s\n' RAIL IFACE ADDRESS RDMA PORT GID_IDX GID
for i in "${!rails[@]}"; do
	ifn=net$((i + 1))
	res=$(cnidriver add "/tmp/demo-$i.conf" "$netns" --ifname "$ifn" --container-id demo)
	addr=$(jq -r '.ips[0].address' <<<"$res")
	# libcni drops the plugin's "roce" result object; the child's ifalias carries the same.
	read -r dev port idx gid < <(in_pod cat "/sys/class/net/$ifn/ifalias" |
		sed -E 's/rdma_dev=(\S+) port=(\S+) gid_index=(\S+) gid=(\S+)/\1 \2 \3 \4/')
	printf '%-7s %-6s %-14s %-6s %-4s %-9s %s\n' "${rails[i]}" "$ifn" "$addr" "$dev" "$port" "$idx" "$gid"
	[[ $(in_pod cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx") != "$zero" ]] ||
		problems+=("the pod reads zero at $dev GID $idx, the index ADD reported for $ifn")
done

heading "GID tables as the pod sees them (non-zero entries: on the OFED view only its children's)"
for i in "${!rails[@]}"; do
	dev=$(rail_rdma_dev "${rails[i]}")
	for f in $(in_pod grep -L '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/"$dev"/ports/1/gids/*); do
		n=${f##*/}
		printf '%s/1 [%2s] %s  %-8s ndev=%s\n' "$dev" "$n" "$(in_pod cat "$f")" \
			"$(in_pod cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$n" 2>/dev/null || echo '?')" \
			"$(in_pod cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/ndevs/$n" 2>/dev/null || echo '?')"
	done | sort -t'[' -k2 -n
done

heading "Source routing in the pod: each address leaves through its own child"
in_pod ip -4 rule show
for i in "${!rails[@]}"; do
	src=$(in_pod ip -4 -o addr show dev "net$((i + 1))" | awk '{print $4}' | cut -d/ -f1)
	printf 'from %-10s -> ' "$src"
	route=$(in_pod ip -4 route get 10.9.0.250 from "$src" 2>&1 | head -n1) || true
	echo "$route"
	[[ $route == *"dev net$((i + 1)) "* ]] || problems+=("traffic from $src does not leave by net$((i + 1))")
done

heading "DEL through libcni"
for i in "${!rails[@]}"; do
	cnidriver del "/tmp/demo-$i.conf" "$netns" --ifname "net$((i + 1))" --container-id demo
	echo "net$((i + 1)) on ${rails[i]}: deleted"
done

heading "Nothing left"
echo "links in the pod:     $(in_pod ip -o link show | awk -F': ' '{print $2}' | paste -sd' ')"
echo "source rules:         $(in_pod ip -4 rule show | grep -c '^1000:' || true)"
allocs=0
for f in /var/lib/cni/networks/demo-rails/*; do
	if [[ ${f##*/} =~ ^[0-9.]+$ ]]; then allocs=$((allocs + 1)); fi
done
echo "host-local addresses: $allocs"
left=0
for i in "${!rails[@]}"; do
	dev=$(rail_rdma_dev "${rails[i]}")
	n=$({ grep -lx '0000:0000:0000:0000:0000:ffff:0a09:00[0-9a-f]\{2\}' /sys/class/infiniband/"$dev"/ports/1/gids/* || true; } | wc -l)
	left=$((left + n))
done
echo "pod GIDs on the rails: $left"
ip netns del "$pod"

if ((${#problems[@]})); then
	heading "Problems"
	printf -- '- %s\n' "${problems[@]}"
	exit 1
fi
