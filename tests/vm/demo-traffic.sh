#!/usr/bin/env bash
# make demo-traffic: inside the VM (trixie-backports kernel), two emulated nodes share rail
# rdma0's L2 segment; roce-ipvlan attaches one pod on each node to it, and ib_write_bw runs
# RoCE v2 between the pods (docs/traffic.md).
set -euo pipefail
source "$ROCE_REPO/tests/vm/lib.sh"

heading() { printf '\n== %s ==\n' "$*"; }
[[ -x $CNI_BIN_DIR/roce-ipvlan ]] || {
	echo "demo: roce-ipvlan not found at ${ROCE_IPVLAN_BIN:-?}; run 'make build'" >&2
	exit 1
}

heading "Kernel $(uname -r); RDMA $(rdma system | head -n1)"

# Node B: a netns holding peer0, the other NIC on rail rdma0's hub, named rdma0 there.
ip netns add nodeB
ip -n nodeB link set lo up
ip link set peer0 netns nodeB
ip -n nodeB link set peer0 name rdma0
ip -n nodeB link set rdma0 up
ip netns exec nodeB rdma link add rxeB0 type rxe netdev rdma0
echo "node A: $(rdma link show rxe0/1)"
echo "node B: $(ip netns exec nodeB rdma link show rxeB0/1)"

heading "ADD: pod A on node A's rdma0, pod B on node B's rdma0 (plugin run inside nodeB)"
declare -A addr
for node in A B; do
	pod=pod$node
	ip netns add "$pod"
	ip -n "$pod" link set lo up
	[[ $node == A ]] && r=1 || r=2
	jq -n --arg s "10.20.$r.1" --arg e "10.20.$r.254" --arg d "/var/lib/cni/node$node" \
		'{cniVersion: "1.0.0", name: "rail0", type: "roce-ipvlan", master: "rdma0",
		  ipam: {type: "host-local", subnet: "10.20.0.0/16", rangeStart: $s, rangeEnd: $e, dataDir: $d}}' \
		>"/tmp/demo-$node.json"
	on=()
	[[ $node == B ]] && on=(ip netns exec nodeB)
	res=$("${on[@]}" env CNI_COMMAND=ADD CNI_CONTAINERID="$pod" CNI_NETNS="/run/netns/$pod" CNI_IFNAME=net1 \
		CNI_PATH="$CNI_PATH" "$CNI_BIN_DIR/roce-ipvlan" <"/tmp/demo-$node.json")
	addr[$node]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$res")
	echo "$pod: net1 ${addr[$node]}  roce: $(jq -c .roce <<<"$res")"
done

heading "Soft-RoCE on each pod's own child (7.x: rxe sends and receives in the pod's netns)"
declare -A gid
for node in A B; do
	pod=pod$node
	ip netns exec "$pod" rdma link add "rxe${node}p" type rxe netdev net1
	want=$(python3 -c 'import ipaddress,sys; print(ipaddress.IPv6Address("::ffff:"+sys.argv[1]).exploded)' "${addr[$node]}")
	for _ in $(seq 50); do
		f=$(ip netns exec "$pod" grep -lx "$want" /sys/class/infiniband/"rxe${node}p"/ports/1/gids/* 2>/dev/null | head -n1) && break
		sleep 0.1
	done
	gid[$node]=${f##*/}
	echo "$pod: $(ip netns exec "$pod" rdma link show "rxe${node}p/1"), GID index ${gid[$node]} = $want"
done

heading "ib_write_bw pod A -> pod B over rail rdma0 (RoCE v2, emulated: figures are not hardware's)"
ip netns exec podB ib_write_bw -d rxeBp -x "${gid[B]}" -D 3 -s 65536 -F >/tmp/demo-bw-server.log 2>&1 &
srv=$!
sleep 1.5
ip netns exec podA ib_write_bw -d rxeAp -x "${gid[A]}" -D 3 -s 65536 -F "${addr[B]}"
wait "$srv"
echo
echo "rail counters: node A rdma0 tx $(cat /sys/class/net/rdma0/statistics/tx_bytes) bytes," \
	"node B rdma0 rx $(ip netns exec nodeB cat /sys/class/net/rdma0/statistics/rx_bytes) bytes"
