# shellcheck shell=bash
# Harness checks that need no roce-ipvlan binary: the emulated node is what the plugin tests
# assume, and Debian's reference chain (ipvlan + tuning + sbr + host-local, the chain operators
# run today) works through the same libcni driver on the same rails.

test_rails_have_soft_roce() {
	local i=0 rail
	for rail in $VM_RAILS; do
		assert_eq "$(rail_rdma_dev "$rail")" "rxe$i" "RDMA device on $rail"
		assert_match "$(rdma link show "rxe$i/1")" 'state ACTIVE' "rxe$i port 1"
		assert_match "$(readlink -f "/sys/class/net/$rail/device")" '/0000:00:[0-9a-f]{2}\.[0-7]/virtio[0-9]+$' \
			"$rail is a PCI virtio NIC"
		i=$((i + 1))
	done
	for rail in $VM_BARE_NICS; do
		! rail_rdma_dev "$rail" >/dev/null || fail "$rail should have no RDMA device"
	done
}

chain_conf() { # chain_conf FILE NAME RAIL SUBNET WITH_SBR
	jq -n --arg name "$2" --arg rail "$3" --arg subnet "$4" --argjson sbr "$5" '
	{cniVersion: "1.0.0", name: $name, plugins: ([
		{type: "ipvlan", master: $rail, mode: "l2", ipam: {type: "host-local", subnet: $subnet}},
		{type: "tuning", sysctl: {
			"net.ipv4.conf.all.rp_filter": "0",
			"net.ipv4.conf.IFNAME.arp_announce": "2", "net.ipv4.conf.IFNAME.arp_filter": "1",
			"net.ipv4.conf.IFNAME.arp_ignore": "1", "net.ipv4.conf.IFNAME.rp_filter": "0",
			"net.ipv4.conf.IFNAME.accept_local": "1"}}
	] + (if $sbr then [{type: "sbr"}] else [] end))}' >"$1"
}

test_reference_chain_add_check_del() {
	local conf=/tmp/chain.conflist ip idx
	chain_conf "$conf" chain-ref rdma1 10.9.201.0/24 true
	new_pod chainpod

	assert_ok cnidriver add "$conf" /run/netns/chainpod
	ip=$(jq -r '.ips[0].address' <<<"$OUT")
	assert_match "$ip" '^10\.9\.201\.[0-9]+/24$' "chain result address"
	ip=${ip%/*}
	assert_match "$(in_pod chainpod ip -d link show dev net1)" 'ipvlan +mode l2' "chain child is IPvlan L2"
	assert_eq "$(in_pod chainpod cat /sys/class/net/net1/iflink)" "$(cat /sys/class/net/rdma1/ifindex)" "chain child's lower device"
	assert_eq "$(in_pod chainpod cat /proc/sys/net/ipv4/conf/net1/arp_ignore)" 1 "tuning applied arp_ignore"
	grep -qE "from $ip lookup 100\b" <<<"$(in_pod chainpod ip -4 rule show)" || fail "sbr rule for $ip missing"
	# The premise of the whole project, on an upstream kernel: the child's address becomes a
	# RoCE v2 GID on the rail's rxe device, with the child as its netdev, visible in the pod.
	idx=$(find_gid chainpod rxe1 1 "$ip" net1) || fail "no RoCE v2 GID for $ip on rxe1 seen from the pod"
	note "chain: $ip is GID rxe1/1/$idx"

	# Known behaviour of the reference chain (plugins 1.1.1), kept as the baseline roce-ipvlan
	# improves on: sbr moves the routes out of the main table, so ipvlan's CHECK cannot find
	# the gateway (and tuning's CHECK would not expand IFNAME in its sysctl keys).
	assert_fails cnidriver check "$conf" /run/netns/chainpod
	assert_match "$ERR" 'Failed to find Gateway' "chain CHECK error"

	assert_ok cnidriver del "$conf" /run/netns/chainpod
	! in_pod chainpod ip link show dev net1 >/dev/null 2>&1 || fail "net1 still in the pod after DEL"
	assert_eq "$(host_local_ips chain-ref)" "" "host-local allocations after DEL"
	! gid_present rxe1 "$ip" || fail "GID for $ip still on rxe1"
	# Not asserted: a second DEL, which sbr fails ("Failed to get link net1"), nor DEL after
	# the netns is gone, which sbr fails too ("unknown FS magic"). roce-ipvlan must do both.
}

test_reference_ipvlan_add_check_del_twice() {
	# A single-plugin .conf (no tuning, no sbr) proves the driver's CHECK and repeated DEL.
	local conf=/tmp/ipvlan.conf
	jq -n '{cniVersion: "1.0.0", name: "ipvlan-ref", type: "ipvlan", master: "rdma2", mode: "l2",
		ipam: {type: "host-local", subnet: "10.9.202.0/24"}}' >"$conf"
	new_pod chainpod2
	assert_ok cnidriver add "$conf" /run/netns/chainpod2 --ifname eth7 --container-id c2
	assert_eq "$(jq -r '.interfaces[0].name' <<<"$OUT")" eth7 "result interface name"
	assert_ok cnidriver check "$conf" /run/netns/chainpod2 --ifname eth7 --container-id c2
	assert_ok cnidriver del "$conf" /run/netns/chainpod2 --ifname eth7 --container-id c2
	assert_eq "$(host_local_ips ipvlan-ref)" "" "host-local allocations after DEL"
	assert_ok cnidriver del "$conf" /run/netns/chainpod2 --ifname eth7 --container-id c2
}
