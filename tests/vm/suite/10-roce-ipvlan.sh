# shellcheck shell=bash
# roce-ipvlan against docs/contract.md on a real kernel with Soft-RoCE rails.
# Every cniVersion (0.3.1, 0.4.0, 1.0.0, 1.1.0) goes through libcni (cnidriver), as a runtime
# would; 1.0.0 and 1.1.0 also by direct exec (cni_exec), where the raw "roce" result object
# (libcni drops it) is checked too.

with_prev() { # with_prev CONF RESULT_JSON: CONF plus prevResult, as runtimes send CHECK/DEL
	jq --argjson r "$2" '. + {prevResult: $r}' "$1"
}

# lifecycle VERSION RAIL SUBNET cnidriver|direct: ADD, verify, CHECK, DEL, verify, DEL again
lifecycle() {
	require_plugin
	local v=$1 rail=$2 subnet=$3 via=$4 net pod conf res cidr info dev port idx table
	net=roce-${v//./}-$via pod=pod${v//./}$via
	conf=/tmp/$net.conf
	roce_conf "$conf" "$net" "$rail" "$v" "$subnet"
	new_pod "$pod"

	if [[ $via == cnidriver ]]; then
		assert_ok cnidriver add "$conf" "/run/netns/$pod"
	else
		assert_ok cni_exec ADD "$conf" "/run/netns/$pod"
	fi
	res=$OUT
	echo "$res" >"/tmp/$net.result"
	assert_eq "$(jq -r .cniVersion <<<"$res")" "$v" "result cniVersion"
	assert_eq "$(jq -r '.interfaces[0].name' <<<"$res")" net1 "result interface name"
	assert_eq "$(jq -r '.interfaces[.ips[0].interface].sandbox' <<<"$res")" "/run/netns/$pod" \
		"result ips[0] points at the sandbox interface"
	[[ $v != 0.[34].* ]] || assert_eq "$(jq -r '.ips[0].version' <<<"$res")" 4 "$v ips[0].version"
	cidr=$(jq -r '.ips[0].address' <<<"$res")
	assert_match "$cidr" "^${subnet%.0/*}\.[0-9]+/${subnet#*/}$" "result address in $subnet"

	if [[ $via == direct ]]; then
		info=$(verify_attachment "$pod" net1 "$rail" "$cidr" "/tmp/$net.result")
	else
		info=$(verify_attachment "$pod" net1 "$rail" "$cidr")
	fi
	read -r dev port idx table <<<"$info"
	note "$v via $via: $cidr on $rail -> $dev port $port gid_index $idx, table $table"

	if [[ $v == 0.3.* ]]; then
		# CHECK came with 0.4.0: libcni does not send it, and the plugin refuses it (code 1).
		# DEL in 0.3.x comes without prevResult (libcni caches none for it).
		[[ $via != cnidriver ]] || assert_fails cnidriver check "$conf" "/run/netns/$pod"
		with_prev "$conf" "$res" >"$conf.prev"
		assert_fails cni_exec CHECK "$conf.prev" "/run/netns/$pod"
		assert_eq "$(cni_code "$OUT")" 1 "CHECK with cniVersion $v (stdout: $OUT)"
		assert_match "$OUT" 'CHECK only with cniVersion 0\.4\.0' "CHECK with cniVersion $v: message"
		if [[ $via == cnidriver ]]; then
			assert_ok cnidriver del "$conf" "/run/netns/$pod"
		else
			assert_ok cni_exec DEL "$conf" "/run/netns/$pod"
		fi
	elif [[ $via == cnidriver ]]; then
		assert_ok cnidriver check "$conf" "/run/netns/$pod"
		assert_ok cnidriver del "$conf" "/run/netns/$pod"
	else
		with_prev "$conf" "$res" >"$conf.prev"
		assert_ok cni_exec CHECK "$conf.prev" "/run/netns/$pod"
		assert_ok cni_exec DEL "$conf.prev" "/run/netns/$pod"
	fi
	verify_gone "$pod" net1 "$net" "${cidr%/*}" "$dev" "$table"

	if [[ $via == cnidriver ]]; then
		assert_ok cnidriver del "$conf" "/run/netns/$pod"
	else
		assert_ok cni_exec DEL "$conf" "/run/netns/$pod"
	fi
}

# 0.3.1: what the NVIDIA Network Operator renders into its NADs (issue #37).
test_lifecycle_v031_cnidriver() { lifecycle 0.3.1 rdma2 10.9.15.0/24 cnidriver; }
# The 0.4.0 test uses the ConnectX-style rail name: nothing may assume "rdmaN".
test_lifecycle_v040_cnidriver() { lifecycle 0.4.0 ens1f0np0 10.9.10.0/24 cnidriver; }
test_lifecycle_v100_cnidriver() { lifecycle 1.0.0 rdma0 10.9.11.0/24 cnidriver; }
test_lifecycle_v100_direct() { lifecycle 1.0.0 rdma3 10.9.13.0/24 direct; }
test_lifecycle_v110_cnidriver() { lifecycle 1.1.0 rdma2 10.9.16.0/24 cnidriver; }
test_lifecycle_v110_direct() { lifecycle 1.1.0 rdma1 10.9.12.0/24 direct; }

# add_one NET RAIL SUBNET POD: ADD through cnidriver (1.0.0); prints the address (CIDR)
add_one() {
	roce_conf "/tmp/$1.conf" "$1" "$2" 1.0.0 "$3"
	new_pod "$4"
	assert_ok cnidriver add "/tmp/$1.conf" "/run/netns/$4"
	jq -r '.ips[0].address' <<<"$OUT"
}

cni_code() { jq -r '.code // empty' <<<"$1" 2>/dev/null || true; }

# ADD creates the child under CNI_IFNAME in one request, which the kernel refuses (EEXIST) when
# the *host* has a link of that name; then it goes through a temporary name and a rename. The
# host link must not be touched, and the pod must get its child all the same.
test_host_link_named_like_the_pod_ifname() {
	require_plugin
	local conf=/tmp/hostname-clash.conf cidr info dev port idx table
	modprobe dummy
	ip link add net7 type dummy
	roce_conf "$conf" hostname-clash rdma2 1.0.0 10.9.14.0/24
	new_pod clash
	assert_ok cnidriver add "$conf" /run/netns/clash --ifname net7
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment clash net7 rdma2 "$cidr")
	read -r dev port idx table <<<"$info"
	assert_match "$(ip -d link show dev net7)" 'dummy' "the host's net7 is still its dummy"
	assert_ok cnidriver del "$conf" /run/netns/clash --ifname net7
	verify_gone clash net7 hostname-clash "${cidr%/*}" "$dev" "$table"
	assert_match "$(ip -d link show dev net7)" 'dummy' "the host's net7 after DEL"
	ip link del net7
}

test_check_detects_removed_address() {
	require_plugin
	local cidr
	cidr=$(add_one chk-addr rdma2 10.9.20.0/24 chkaddr)
	in_pod chkaddr ip addr del "$cidr" dev net1
	assert_fails cnidriver check /tmp/chk-addr.conf /run/netns/chkaddr
	assert_eq "$(cni_code "$OUT")" 107 "CHECK error code"
	# The address check's own words: "addr" or the bare IP also match what a later check says
	# (the GID check names the child's GID, ::ffff:<IP>), so they passed without this check.
	assert_match "$(jq -r .msg <<<"$OUT")" "expected address ${cidr//./\\.}, found" "CHECK error names the address"
	assert_ok cnidriver del /tmp/chk-addr.conf /run/netns/chkaddr
	assert_eq "$(host_local_ips chk-addr)" "" "host-local allocations after DEL"
}

test_check_detects_changed_sysctl() {
	require_plugin
	add_one chk-sysctl rdma2 10.9.21.0/24 chksys >/dev/null
	in_pod chksys sysctl -qw net.ipv4.conf.net1.arp_ignore=0
	assert_fails cnidriver check /tmp/chk-sysctl.conf /run/netns/chksys
	assert_eq "$(cni_code "$OUT")" 107 "CHECK error code"
	assert_match "$(jq -r .msg <<<"$OUT")" 'expected sysctl net\.ipv4\.conf\.net1\.arp_ignore = 1, found 0' "CHECK error names the sysctl"
	assert_ok cnidriver del /tmp/chk-sysctl.conf /run/netns/chksys
	assert_eq "$(host_local_ips chk-sysctl)" "" "host-local allocations after DEL"
}

test_check_detects_removed_rule() {
	require_plugin
	local cidr table
	cidr=$(add_one chk-rule rdma2 10.9.23.0/24 chkrule)
	table=$((10000 + $(in_pod chkrule cat /sys/class/net/net1/ifindex)))
	assert_ok cnidriver check /tmp/chk-rule.conf /run/netns/chkrule
	in_pod chkrule ip rule del from "${cidr%/*}" lookup "$table"
	assert_fails cnidriver check /tmp/chk-rule.conf /run/netns/chkrule
	assert_eq "$(cni_code "$OUT")" 107 "CHECK error code"
	assert_match "$(jq -r .msg <<<"$OUT")" "expected rule \"from ${cidr%/*} lookup $table\", found none" "CHECK error names the missing rule"
	assert_ok cnidriver del /tmp/chk-rule.conf /run/netns/chkrule
	assert_eq "$(host_local_ips chk-rule)" "" "host-local allocations after DEL"
}

test_del_after_netns_deleted() {
	require_plugin
	local cidr
	cidr=$(add_one del-gone rdma3 10.9.22.0/24 delgone)
	ip netns del delgone
	assert_ok cnidriver del /tmp/del-gone.conf /run/netns/delgone
	assert_eq "$(host_local_ips del-gone)" "" "host-local allocations after DEL"
	! gid_present rxe3 "${cidr%/*}" || fail "GID for $cidr still on rxe3"
	assert_ok cnidriver del /tmp/del-gone.conf /run/netns/delgone
}

# A NIC without an RDMA device is "no RDMA port on the rail" (101 in docs/contract.md), found
# before anything is created. 104 (the GID never appeared) cannot be provoked on an upstream
# kernel, which always adds the GID for an upper device's address; unit tests cover it.
test_rail_without_rdma_fails_101() {
	require_plugin
	local rail=${VM_BARE_NICS%% *}
	roce_conf /tmp/bare.conf bare "$rail" 1.0.0 10.9.30.0/24 '{"rdma": {"gidTimeoutMs": 1500}}'
	new_pod bare
	assert_fails cni_exec ADD /tmp/bare.conf /run/netns/bare
	assert_eq "$(cni_code "$OUT")" 101 "error code for a rail without RDMA (stdout: $OUT)"
	assert_eq "$(in_pod bare ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " \
		"links left in the pod"
	assert_eq "$(host_local_ips bare)" "" "host-local allocations after the failed ADD"
	# Through libcni too: the runtime must see a failure, not a half-made attachment.
	assert_fails cnidriver add /tmp/bare.conf /run/netns/bare
	assert_eq "$(host_local_ips bare)" "" "host-local allocations after the failed ADD (libcni)"
}

# The GID never appears (104): rdma.device names the RDMA device of another rail, so the child's
# GID lands elsewhere. By then ADD has created the link, allocated the address, set sysctls and
# added the source rule: all of it must be undone, including the pod-wide rp_filter.
test_gid_timeout_fails_104_and_undoes_everything() {
	require_plugin
	local other
	other=$(rail_rdma_dev rdma0)
	roce_conf /tmp/gidto.conf gidto rdma1 1.0.0 10.9.32.0/24 "{\"rdma\": {\"device\": \"$other\", \"gidTimeoutMs\": 1500}}"
	new_pod gidto
	in_pod gidto sysctl -qw net.ipv4.conf.all.rp_filter=1
	assert_fails cni_exec ADD /tmp/gidto.conf /run/netns/gidto
	assert_eq "$(cni_code "$OUT")" 104 "error code when the GID never appears (stdout: $OUT)"
	assert_match "$OUT" "did not appear on $other port 1 within 1500 ms" "timeout message names device and wait"
	assert_match "$OUT" "::ffff:10\.9\.32\.[0-9]+" "timeout message names the GID"
	assert_eq "$(in_pod gidto ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " \
		"links left in the pod"
	assert_eq "$(host_local_ips gidto)" "" "host-local allocations after the failed ADD"
	assert_eq "$(count_lines 'lookup 1[0-9]{4}' in_pod gidto ip rule show)" 0 \
		"source rules left in the pod"
	assert_eq "$(in_pod gidto sysctl -n net.ipv4.conf.all.rp_filter)" 1 "pod-wide rp_filter restored"
}

test_l3_mode_refused_code_7() {
	require_plugin
	roce_conf /tmp/l3.conf l3 rdma0 1.0.0 10.9.31.0/24 '{"mode": "l3"}'
	new_pod l3pod
	assert_fails cni_exec ADD /tmp/l3.conf /run/netns/l3pod
	assert_eq "$(cni_code "$OUT")" 7 "error code for mode l3 (stdout: $OUT)"
	assert_eq "$(host_local_ips l3)" "" "host-local allocations after the refused ADD"
}

# One pod on four rails that share one flat IPv4 subnet and one host-local range (the A100
# layout): every child must get its own rail's GID, and source routing must send traffic
# from each address out of its own child, not whichever child owns the main-table route.
test_four_rails_one_flat_subnet() {
	require_plugin
	local i rail cidr ip info dev port idx table peer=10.9.100.250 seen=" "
	local -a ips devs tables
	new_pod a100
	i=1
	for rail in rdma0 rdma1 rdma2 rdma3; do
		roce_conf "/tmp/flat-$i.conf" flat "$rail" 1.0.0 10.9.100.0/24
		assert_ok cnidriver add "/tmp/flat-$i.conf" /run/netns/a100 --ifname "net$i" --container-id a100
		cidr=$(jq -r '.ips[0].address' <<<"$OUT")
		info=$(verify_attachment a100 "net$i" "$rail" "$cidr")
		read -r dev port idx table <<<"$info"
		[[ $seen != *" ${cidr%/*} "* ]] || fail "address ${cidr%/*} handed out twice"
		seen+="${cidr%/*} "
		ips[i]=${cidr%/*} devs[i]=$dev tables[i]=$table
		note "net$i on $rail: $cidr, $dev gid_index $idx, table $table"
		i=$((i + 1))
	done
	for i in 1 2 3 4; do
		assert_match "$(in_pod a100 ip -4 route get "$peer" from "${ips[i]}")" "dev net$i( |$)" \
			"route to $peer from ${ips[i]}"
	done
	for i in 1 2 3 4; do
		assert_ok cnidriver check "/tmp/flat-$i.conf" /run/netns/a100 --ifname "net$i" --container-id a100
	done
	for i in 1 2 3 4; do
		assert_ok cnidriver del "/tmp/flat-$i.conf" /run/netns/a100 --ifname "net$i" --container-id a100
		verify_gone a100 "net$i" flat "${ips[i]}" "${devs[i]}" "${tables[i]}"
	done
	assert_eq "$(host_local_ips flat)" "" "host-local allocations after DEL"
}

# The child announces its addresses when it comes up (arp_notify; ndisc_notify for IPv6): a
# peer on the rail's segment whose neighbour entries for the pod's addresses are stale (another
# MAC: the addresses were another node's before) learns the rail's MAC, which the child shares,
# without sending anything itself.
test_child_announces_its_addresses_on_link_up() {
	require_plugin
	local mac got v4=10.9.40.7 v6=fd00:40::7 i
	new_pod garp
	new_pod garppeer
	ip link set peer3 netns garppeer
	ip -n garppeer link set peer3 up
	ip -n garppeer addr add 10.9.40.254/24 dev peer3
	ip -n garppeer addr add fd00:40::fe/64 dev peer3 nodad
	for ip in $v4 $v6; do
		ip -n garppeer neigh replace "$ip" lladdr 02:00:00:00:00:99 dev peer3 nud stale
	done
	jq -n --arg v4 $v4 --arg v6 $v6 --argjson limits "$VM_TIMEOUTS" '{cniVersion: "1.0.0", name: "garp",
		type: "roce-ipvlan", master: "rdma3",
		ipam: {type: "host-local", ranges: [[{subnet: "10.9.40.0/24", rangeStart: $v4, rangeEnd: $v4}],
			[{subnet: "fd00:40::/64", rangeStart: $v6, rangeEnd: $v6}]]}} + $limits' >/tmp/garp.conf
	assert_ok cni_exec ADD /tmp/garp.conf /run/netns/garp
	mac=$(cat /sys/class/net/rdma3/address)
	for ip in $v4 $v6; do
		# The IPv6 announcement follows DAD (about a second); the wait ends at the first match.
		for i in $(seq 100); do
			got=$(ip -n garppeer neigh show "$ip" dev peer3)
			[[ $got == *"lladdr $mac "* ]] && break
			sleep 0.1
		done
		assert_match "$got" "lladdr $mac " "the peer's neighbour entry for $ip after the child came up"
		note "peer: $got"
	done
	assert_ok cni_exec DEL /tmp/garp.conf /run/netns/garp
	assert_eq "$(host_local_ips garp)" "" "host-local allocations after DEL"
}
