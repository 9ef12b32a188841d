# shellcheck shell=bash
# roce-ipvlan diagnose on a real kernel with Soft-RoCE rails (docs/troubleshooting.md).
# This is the kernel's own ib_core: every GID is visible from every namespace. "Hidden" GIDs (the
# DOCA-OFED check) are provoked on the OFED view by 12-ofed.sh (test_ofed_diagnose_live).

diag() { "$CNI_BIN_DIR/roce-ipvlan" diagnose "$@"; }

# attach NET RAIL SUBNET POD: a roce-ipvlan attachment (net1) through libcni
attach() {
	roce_conf "/tmp/$1.conf" "$1" "$2" 1.0.0 "$3"
	new_pod "$4"
	assert_ok cnidriver add "/tmp/$1.conf" "/run/netns/$4"
}

# wait_gid DEV IPV6: until a GID with that value is on DEV (the kernel adds it from a work item)
wait_gid() {
	local want
	want=$(gid_long "$2")
	for _ in $(seq 100); do
		grep -qlx "$want" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null && return 0
		sleep 0.1
	done
	fail "no GID $2 on $1 after 10 s"
}

# jq_ok JSON FILTER WHAT: FILTER must yield true
jq_ok() {
	[[ $(jq -r "$2" <<<"$1") == true ]] || fail "$3 (jq '$2' on the diagnose JSON)"
}

test_diagnose_node_view() {
	require_plugin
	assert_ok diag
	assert_match "$OUT" 'verdict: healthy' "text verdict"
	assert_match "$OUT" "ib_core: the kernel's own \(upstream\) build" "ib_core flavor"
	assert_match "$OUT" 'RDMA netns mode: shared' "netns mode"
	assert_ok diag --json
	local json=$OUT rail dev
	jq_ok "$json" '.report.healthy' "node view is healthy"
	jq_ok "$json" '.report.ibCore.flavor == "upstream"' "ib_core is upstream"
	jq_ok "$json" '.snapshot.targetIsPid1Netns' "the node's netns is PID 1's"
	for rail in $VM_RAILS; do
		dev=$(rail_rdma_dev "$rail")
		jq_ok "$json" "[.report.ports[] | select(.device == \"$dev\" and .port == 1
			and .rail == \"$rail\" and .linkLayer == \"Ethernet\" and (.state | test(\"ACTIVE\"))
			and (.netdevsHere | index(\"$rail\") != null))] | length == 1" \
			"$dev port 1 listed with rail $rail, ACTIVE, its netdev here"
		# The rail's default link-local GID sits at index 0 and belongs here.
		jq_ok "$json" ".report.ports[] | select(.device == \"$dev\") | .gids[0].class == \"usable\"" \
			"$dev GID 0 usable on the node"
		note "$dev: rail $rail"
	done
	jq_ok "$json" "[.report.ports[] | select(.rail == \"${VM_BARE_NICS%% *}\")] | length == 0" \
		"the NIC without RDMA is no rail"
}

test_diagnose_pod_with_attachment() {
	require_plugin
	local alias idx dev json pid want
	attach diag-ok rdma1 10.11.40.0/24 diagok
	alias=$(in_pod diagok cat /sys/class/net/net1/ifalias)
	idx=$(sed -E 's/.*gid_index=([0-9]+).*/\1/' <<<"$alias")
	dev=$(rail_rdma_dev rdma1)

	assert_ok diag --netns /run/netns/diagok --json
	json=$OUT
	jq_ok "$json" '.report.healthy' "pod with an attachment is healthy"
	jq_ok "$json" '.snapshot.host != null' "a host view was read from PID 1's netns"
	# One check per field, so that a failure names the field.
	local net1='.report.netdevs[] | select(.name == "net1")'
	jq_ok "$json" "$net1 | .kind == \"ipvlan\"" "net1 is an IPvlan child"
	jq_ok "$json" "$net1 | .rail == \"rdma1\" and .parent == \"rdma1\"" "net1's rail and parent are rdma1"
	jq_ok "$json" "$net1 | .rdmaPort == \"$dev port 1\"" "net1's RDMA port is $dev port 1"
	jq_ok "$json" "$net1 | .ifalias.gidIndex == $idx" "net1's ifalias read back ($alias)"
	jq_ok "$json" "$net1 | .recommendedGidIndex == $idx" "recommended GID index $idx, as in the ifalias"
	jq_ok "$json" ".report.ports[] | select(.device == \"$dev\") | .gids[] | select(.index == $idx)
		| .class == \"usable\" and .ndev == \"net1\" and .gidType == \"RoCE v2\"" \
		"GID $idx is net1's and usable"
	jq_ok "$json" "[.report.findings[] | select(.code == \"gid-index\" and
		(.message | startswith(\"GID index for UCX/NCCL should be $idx \")))] | length == 1" \
		"GID index advice"
	# Rails the pod does not use are reported, but are no problem.
	jq_ok "$json" '[.report.findings[] | select(.code == "no-rail-netdev" and .severity == "info")]
		| length > 0' "other rails reported as info"
	note "net1 on rdma1: $alias"

	# Same answer by --pid, and from inside the pod (ip netns exec keeps the VM's PID 1).
	# Not in_pod: a backgrounded function is a subshell that stays in the VM's namespace.
	ip netns exec diagok sleep 60 &
	pid=$!
	want=$(in_pod diagok readlink /proc/self/ns/net)
	# ip netns exec enters the namespace after the fork: wait until it has.
	for _ in $(seq 100); do
		[[ $(readlink "/proc/$pid/ns/net") == "$want" ]] && break
		sleep 0.1
	done
	assert_ok diag --pid "$pid"
	kill "$pid"
	assert_match "$OUT" "net1 \(ipvlan\) on rail rdma1 \($dev port 1\): RoCE v2 GID index $idx" "text by --pid"
	assert_ok in_pod diagok "$CNI_BIN_DIR/roce-ipvlan" diagnose
	assert_match "$OUT" 'verdict: healthy' "run inside the pod"
	assert_ok cnidriver del /tmp/diag-ok.conf /run/netns/diagok
}

test_diagnose_pod_without_attachment() {
	require_plugin
	new_pod diagbare
	assert_fails diag --netns /run/netns/diagbare
	assert_eq "$RC" 1 "exit status for a problem"
	assert_match "$OUT" 'ERROR +no netdev on any rail in this namespace' "verdict"
	assert_match "$OUT" 'no netdev on rail rdma0 \(rxe[0-9]+ port 1\) in this namespace' "per-rail verdict"
	assert_match "$OUT" 'fix: attach a roce-ipvlan network for this rail' "fix"
	assert_fails diag --netns /run/netns/diagbare --json
	jq_ok "$OUT" '.report.healthy == false' "JSON healthy"
	jq_ok "$OUT" '[.report.findings[] | select(.code == "no-netdev-on-any-rail" and .severity == "error")]
		| length == 1' "JSON finding"
	# Upstream shows the host's GIDs here: visible, but another namespace's.
	jq_ok "$OUT" '[.report.ports[].gids[] | select(.class == "usable")] | length == 0' "no usable GID"
	jq_ok "$OUT" '[.report.ports[].gids[] | select(.class == "foreign")] | length > 0' "host GIDs are foreign"
}

# IPv6 on a child: a configured ULA address (the IPAM placeholder) gets its GID before an
# address with a finite lifetime (what SLAAC adds; no IFA_F_PERMANENT), and a tentative one.
test_diagnose_ipv6_placeholder_and_tentative() {
	require_plugin
	local json ph slaac dev
	attach diag-v6 rdma2 10.11.41.0/24 diagv6
	in_pod diagv6 sysctl -qw net.ipv6.conf.net1.disable_ipv6=0
	dev=$(rail_rdma_dev rdma2)
	in_pod diagv6 ip -6 addr add fd01:0:0:100::5/112 dev net1 nodad
	wait_gid "$dev" fd01:0:0:100::5
	in_pod diagv6 ip -6 addr add 2001:db8:40::10/64 dev net1 nodad valid_lft 3600 preferred_lft 3600
	wait_gid "$dev" 2001:db8:40::10
	assert_fails diag --netns /run/netns/diagv6 --json
	json=$OUT
	ph=$(jq -r '.report.netdevs[] | select(.name == "net1") | .addresses[]
		| select(.address == "fd01:0:0:100::5/112") | .roceV2GidIndex' <<<"$json")
	slaac=$(jq -r '.report.netdevs[] | select(.name == "net1") | .addresses[]
		| select(.address == "2001:db8:40::10/64") | .roceV2GidIndex' <<<"$json")
	[[ $ph =~ ^[0-9]+$ && $slaac =~ ^[0-9]+$ ]] || fail "GID indexes: placeholder '$ph', slaac '$slaac'"
	((ph < slaac)) || fail "the placeholder's GID ($ph) should sort before the SLAAC one ($slaac)"
	jq_ok "$json" ".report.netdevs[] | select(.name == \"net1\") | .recommendedGidIndex == $slaac" \
		"recommended index is the SLAAC address's"
	jq_ok "$json" "[.report.findings[] | select(.code == \"placeholder-gid-first\" and .severity == \"warning\"
		and (.fix | contains(\"UCX_IB_GID_INDEX=$slaac\")))] | length == 1" "placeholder warning"
	note "placeholder GID $ph, SLAAC-like GID $slaac"

	# DAD that cannot finish for a while: 1 probe every 30 s.
	in_pod diagv6 sysctl -qw net.ipv6.conf.net1.dad_transmits=1
	in_pod diagv6 sysctl -qw net.ipv6.neigh.net1.retrans_time_ms=30000
	in_pod diagv6 ip -6 addr add 2001:db8:41::10/64 dev net1
	assert_fails diag --netns /run/netns/diagv6 --json
	jq_ok "$OUT" '[.report.findings[] | select(.code == "tentative-address"
		and (.message | startswith("2001:db8:41::10/64 on net1 is still tentative")))] | length == 1' \
		"tentative address reported"
	assert_ok cnidriver del /tmp/diag-v6.conf /run/netns/diagv6
}

test_diagnose_bad_namespace_exits_2() {
	require_plugin
	assert_fails diag --netns /run/netns/does-not-exist
	assert_eq "$RC" 2 "exit status when diagnose cannot run"
	assert_fails diag --pid notapid
	assert_eq "$RC" 2 "exit status for a bad argument"
}
