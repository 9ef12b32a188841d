# shellcheck shell=bash
# The rail's GID table (plugin/src/attach/gid_capacity.rs): ADD refuses with 110, before it
# changes anything, a child the table has no room for, where the kernel would add no GID and
# the GID wait would run out (104); `diagnose` and `ready` say the same on the node. An address
# takes one slot per RoCE version the port registers: 2 on ConnectX (v1 and v2), 1 on this
# kernel's Soft-RoCE (v2 only), so an IPv4 child takes 1 here (2 with "ipv6.linkLocal"). The
# table is filled for real: addresses on the rail netdev itself take slots as a pod's do.

ZERO_GID=0000:0000:0000:0000:0000:0000:0000:0000

gid_slots() { find "/sys/class/infiniband/$1/ports/1/gids" -mindepth 1 -maxdepth 1 | wc -l; }
gid_used() { cat /sys/class/infiniband/"$1"/ports/1/gids/* | grep -cvx "$ZERO_GID" || true; }

# gid_types DEV: entries per address (slots holding the value of slot 0)
gid_types() { cat /sys/class/infiniband/"$1"/ports/1/gids/* | grep -cx "$(cat "/sys/class/infiniband/$1/ports/1/gids/0")"; }

# pod_gid_count POD DEV IFNAME: the slots of DEV's table that IFNAME owns, read in the pod
pod_gid_count() {
	local n=0 f i
	for f in $(in_pod "$1" grep -Lx "$ZERO_GID" /sys/class/infiniband/"$2"/ports/1/gids/*); do
		i=${f##*/}
		[[ $(in_pod "$1" cat "/sys/class/infiniband/$2/ports/1/gid_attrs/ndevs/$i" 2>/dev/null) == "$3" ]] && n=$((n + 1))
	done
	echo "$n"
}

# wait_used DEV N: up to 30 s for DEV's table to show N used slots (the kernel adds GIDs from
# a work queue, after the address)
wait_used() {
	local _
	for _ in $(seq 300); do
		[[ $(gid_used "$1") == "$2" ]] && return 0
		sleep 0.1
	done
	fail "$1's GID table shows $(gid_used "$1") used slots, expected $2"
}

test_gid_capacity_a_full_table_fails_add_with_110_before_any_change() {
	require_plugin
	local rail=rdma3 dev slots used free n i t _
	dev=$(rail_rdma_dev $rail)
	slots=$(gid_slots "$dev") used=$(gid_used "$dev")
	# Entries per address: 1 on Soft-RoCE (RoCE v2 only since Linux 5.x), 2 on ConnectX.
	ip addr add 10.199.0.1/32 dev $rail label $rail:f
	for _ in $(seq 100); do (($(gid_used "$dev") > used)) && break; sleep 0.1; done
	t=$(($(gid_used "$dev") - used)) used=$(gid_used "$dev")
	free=$((slots - used)) n=$((free / t))
	note "$dev: $slots slots, $used used; filling with $n addresses on $rail"
	trap 'ip -4 addr flush dev '$rail' scope global label '$rail':f; cleanup_pods' EXIT
	for ((i = 0; i < n; i++)); do
		echo "addr add 10.$((200 + i / 65536)).$((i / 256 % 256)).$((i % 256))/32 dev $rail label $rail:f"
	done | ip -batch -
	wait_used "$dev" $((used + t * n))
	roce_conf /tmp/full.conf full $rail 1.0.0 10.9.50.0/24 '{"rdma": {"gidTimeoutMs": 60000}}'
	new_pod full
	assert_fails cnidriver add /tmp/full.conf /run/netns/full
	assert_eq "$(cni_code "$OUT")" 110 "error code of a full GID table (stdout: $OUT)"
	note "$(jq -r .msg <<<"$OUT")"
	assert_match "$(jq -r .msg <<<"$OUT")" "GID table of rail $rail \\($dev port 1\\) has room for $((free % t)) more entries, expected at least $t" \
		"the message names the rail, the room and the need"
	assert_match "$(jq -r .msg <<<"$OUT")" "$((slots - free % t)) of $slots slots used" "the message counts the table"
	assert_match "$(jq -r .msg <<<"$OUT")" 'ipv6.linkLocal' "the message says what to do"
	# Refused before anything changed: no child, no IPAM allocation.
	assert_eq "$(pod_links full)" "" "no child in the pod"
	# host-local makes its network's directory on its first call and keeps it after a release:
	# an ADD that got as far as IPAM and then undid everything would leave it.
	[[ ! -e /var/lib/cni/networks/full ]] || fail "IPAM was called: $(ls -a /var/lib/cni/networks/full)"
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" diagnose
	assert_match "$OUT" "gid-table-full|GID table of rail $rail \\($dev port 1\\) has at most $((free % t)) free slots" \
		"diagnose on the node: $OUT"
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" ready --to "$CNI_BIN_DIR" --rails $rail
	assert_match "$OUT" "the GID table of rail $rail \\($dev port 1\\) is full" "ready on the node: $OUT"
	# Two addresses fewer: room for the child, which gets its GID.
	ip -4 addr del 10.200.0.0/32 dev $rail
	ip -4 addr del 10.200.0.1/32 dev $rail
	wait_used "$dev" $((used + t * n - 2 * t))
	assert_ok cnidriver add /tmp/full.conf /run/netns/full
	verify_attachment full net1 $rail "$(jq -r '.ips[0].address' <<<"$OUT")" >/dev/null
	assert_ok cnidriver del /tmp/full.conf /run/netns/full
}

# Fewer GIDs per child: an IPv4 child has IPv6 off unless the configuration keeps it, so on
# ConnectX it takes 2 slots, not 4 (its link-local fe80:: address as v1 and v2; 1 and 2 on this
# kernel's Soft-RoCE, v2 only); on a ConnectX port of 256 slots that doubles the children a
# rail holds. Kept, the link-local address takes at least as many again (the kernel may add
# more: 3 slots were seen here). The children have names of their own: on the kernel's own
# ib_core a pod reads other namespaces' entries too, whose children may be net1.
test_gid_capacity_an_ipv4_child_takes_one_slot_per_roce_version_more_with_link_local() {
	require_plugin
	local rail=rdma2 dev
	dev=$(rail_rdma_dev $rail)
	trap cleanup_pods EXIT
	roce_conf /tmp/v4only.conf v4only $rail 1.0.0 10.9.51.0/24
	new_pod v4only
	assert_ok cnidriver add /tmp/v4only.conf /run/netns/v4only --ifname gcap1
	assert_eq "$(in_pod v4only cat /proc/sys/net/ipv6/conf/gcap1/disable_ipv6)" 1 "IPv6 off on the IPv4 child"
	assert_eq "$(in_pod v4only ip -6 -o addr show dev gcap1)" "" "no IPv6 address on the IPv4 child"
	assert_eq "$(pod_gid_count v4only "$dev" gcap1)" "$(gid_types "$dev")" "GID slots of an IPv4 child"
	assert_ok cnidriver check /tmp/v4only.conf /run/netns/v4only --ifname gcap1
	assert_ok cnidriver del /tmp/v4only.conf /run/netns/v4only --ifname gcap1

	roce_conf /tmp/v4ll.conf v4ll $rail 1.0.0 10.9.52.0/24 '{"ipv6": {"linkLocal": true}}'
	new_pod v4ll
	assert_ok cnidriver add /tmp/v4ll.conf /run/netns/v4ll --ifname gcap2
	# Kept, the link-local address becomes GIDs of the child too (the kernel adds them from a
	# work queue, after DAD): more slots than without it, at least one per RoCE version more.
	local _ n t
	t=$(gid_types "$dev")
	for _ in $(seq 10); do
		n=$(pod_gid_count v4ll "$dev" gcap2)
		((n >= 2 * t)) && break
		sleep 1
	done
	note "gcap2 owns $n slots with its link-local address kept"
	((n >= 2 * t)) || fail "GID slots of an IPv4 child with its IPv6 link-local: $n, expected at least $((2 * $(gid_types "$dev")))"
	assert_match "$(in_pod v4ll ip -6 -o addr show dev gcap2)" 'inet6 fe80::' "the link-local address is kept"
	assert_ok cnidriver del /tmp/v4ll.conf /run/netns/v4ll --ifname gcap2
}
