# shellcheck shell=bash
# Hardening (issue 14, part A) on a real kernel, through libcni (cnidriver) where a runtime
# would call: DEL that never strands a pod, the NAD (not the pod) choosing the rail, the host
# namespace refused as a pod, interface names the kernel would rewrite.

# DEL must work on the configuration the pod was added with even when this release would
# refuse it for ADD (an older release accepted it, a newer one added keys, the NAD was edited):
# the runtime does not retry a failed DEL, so the address would leak and the pod hang.
test_del_tolerates_what_add_refuses() {
	require_plugin
	local variant conf=/tmp/del-lenient.conf cidr info dev table n=0
	for variant in '{"mode": "l3"}' '{"deviceID": "0"}' '{"rdma": {"keyOfANewerRelease": 1}}'; do
		n=$((n + 1))
		roce_conf "$conf" del-lenient rdma1 1.0.0 10.9.140.0/24
		new_pod "dellen$n"
		assert_ok cnidriver add "$conf" "/run/netns/dellen$n"
		cidr=$(jq -r '.ips[0].address' <<<"$OUT")
		info=$(verify_attachment "dellen$n" net1 rdma1 "$cidr")
		read -r dev _ _ table <<<"$info"
		# ADD refuses the changed configuration...
		jq --argjson v "$variant" '. + $v' "$conf" >"$conf.changed"
		new_pod "dellenx$n"
		assert_fails cnidriver add "$conf.changed" "/run/netns/dellenx$n"
		assert_eq "$(cni_code "$OUT")" 7 "ADD with $variant"
		# ...DEL with it must tear the attachment down and release the address.
		assert_ok cnidriver del "$conf.changed" "/run/netns/dellen$n"
		verify_gone "dellen$n" net1 del-lenient "${cidr%/*}" "$dev" "$table"
		assert_eq "$(host_local_ips del-lenient)" "" "host-local allocations after DEL with $variant"
		note "DEL with $variant: child gone, ${cidr%/*} released"
	done
}

# The host's namespace as CNI_NETNS (a runtime bug, or a hostNetwork pod given a secondary
# network): ADD would put the child, its source rules and all.rp_filter=0 into the host. ADD and
# CHECK refuse it with 105 before any change; DEL leaves the host's links and rules alone (here
# a host IPvlan link named like CNI_IFNAME) and still releases the address.
test_host_netns_refused_as_a_pod() {
	require_plugin
	local conf=/tmp/hostns.conf before after
	roce_conf "$conf" hostns rdma2 1.0.0 10.9.141.0/24
	before=$(host_snapshot)
	assert_fails cnidriver add "$conf" /proc/1/ns/net --container-id hostns
	assert_eq "$(cni_code "$OUT")" 105 "ADD in the host namespace (stdout: $OUT)"
	assert_match "$OUT" "plugin's own \(the host's\) network namespace" "ADD message"
	after=$(host_snapshot)
	assert_eq "$after" "$before" "the host after the refused ADD"
	assert_eq "$(host_local_ips hostns)" "" "host-local allocations after the refused ADD"
	jq '. + {prevResult: {cniVersion: "1.0.0", ips: []}}' "$conf" >"$conf.prev"
	assert_fails cni_exec CHECK "$conf.prev" /proc/1/ns/net
	assert_eq "$(cni_code "$OUT")" 105 "CHECK in the host namespace (stdout: $OUT)"

	ip link add hnet1 link rdma2 type ipvlan mode l2
	before=$(host_snapshot)
	assert_ok cnidriver del "$conf" /proc/1/ns/net --container-id hostns --ifname hnet1
	assert_match "$(ip -d link show dev hnet1)" 'ipvlan' "the host's hnet1 after DEL"
	assert_eq "$(host_snapshot)" "$before" "the host after DEL"
	ip link del hnet1
}

# cni-args come from the pod's network selection element, i.e. from whoever may create pods
# that use the NAD: they may choose only rails the NAD lists in allowedRails. Multus hands them
# to the plugin as args.cni in the configuration; the configurations below carry them exactly
# so and go through libcni. CNI_ARGS (cnidriver --args, the runtime's K=V list) never chooses a
# rail.
test_cni_args_choose_only_allowed_rails() {
	require_plugin
	local base=/tmp/allowed.conf conf=/tmp/allowed-case.conf cidr info dev table args before n=0
	jq -n '{cniVersion: "1.0.0", name: "allowed", type: "roce-ipvlan", allowedRails: ["rdma2", "ens?f0np0"],
		ipam: {type: "host-local", subnet: "10.9.142.0/24"}}' >"$base"
	# An allowed rail: attached there.
	jq '. + {args: {cni: {master: "rdma2"}}}' "$base" >"$conf"
	new_pod allowok
	assert_ok cnidriver add "$conf" /run/netns/allowok
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment allowok net1 rdma2 "$cidr")
	read -r dev _ _ table <<<"$info"
	assert_ok cnidriver del "$conf" /run/netns/allowok
	verify_gone allowok net1 allowed "${cidr%/*}" "$dev" "$table"
	# Rails the NAD does not allow, by netdev or through the RDMA device of one: 7, nothing left.
	for args in '{"master": "rdma3"}' "{\"rdmaDevice\": \"$(rail_rdma_dev rdma3)\"}"; do
		n=$((n + 1))
		jq --argjson a "$args" '. + {args: {cni: $a}}' "$base" >"$conf"
		new_pod "allowno$n"
		before=$(host_snapshot)
		assert_fails cnidriver add "$conf" "/run/netns/allowno$n"
		assert_eq "$(cni_code "$OUT")" 7 "cni-args $args (stdout: $OUT)"
		assert_match "$(jq -r .msg <<<"$OUT")" \
			'is rail rdma3, which this NAD does not allow: "allowedRails" is \["rdma2", "ens\?f0np0"\]' \
			"message for $args"
		assert_eq "$(pod_links "allowno$n")" "" "links in the pod after cni-args $args"
		assert_eq "$(host_local_ips allowed)" "" "host-local allocations after cni-args $args"
		assert_eq "$(host_snapshot)" "$before" "the host after cni-args $args"
	done
	# A NAD without allowedRails lets no pod choose.
	jq 'del(.allowedRails) + {args: {cni: {master: "rdma2"}}}' "$base" >"$conf"
	new_pod allownone
	assert_fails cnidriver add "$conf" /run/netns/allownone
	assert_eq "$(cni_code "$OUT")" 7 "cni-args without allowedRails (stdout: $OUT)"
	assert_match "$OUT" 'lets no pod choose it' "message without allowedRails"
	assert_eq "$(host_local_ips allowed)" "" "host-local allocations without allowedRails"
	# CNI_ARGS is not cni-args: the NAD's master stays the rail. (IgnoreUnknown=1 because
	# host-local refuses CNI_ARGS keys it does not know.)
	args="IgnoreUnknown=1;master=rdma3;rdmaDevice=$(rail_rdma_dev rdma3)"
	jq '. + {master: "rdma1"}' "$base" >"$conf"
	new_pod allowcniargs
	assert_ok cnidriver add "$conf" /run/netns/allowcniargs --args "$args"
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment allowcniargs net1 rdma1 "$cidr")
	read -r dev _ _ table <<<"$info"
	assert_ok cnidriver del "$conf" /run/netns/allowcniargs --args "$args"
	verify_gone allowcniargs net1 allowed "${cidr%/*}" "$dev" "$table"
}
