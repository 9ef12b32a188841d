# shellcheck shell=bash
# A pod attached to 4 rails through one NAD, as users write it (cni-args pick the rail): Ready,
# network-status from Multus, each child's GID inside the pod at the index its ifalias names,
# `roce-ipvlan env` in the pod.

test_pod_on_four_rails() {
	local status ip i
	rail_nad rails
	testpod four "$(networks_on_rails rails rdma0 rdma1 rdma2 rdma3)"
	wait_pod_ready four 300 || { kubectl describe pod four | tail -n 15; fail "pod 'four' is not Ready"; }
	status=$(netstatus four)
	note "network-status: $(jq -c '[.[] | {name, interface, ips, "device-info"}]' <<<"$status")"
	assert_eq "$(jq '[.[] | select(.name == "default/rails")] | length' <<<"$status")" 4 "rails entries in network-status"
	for i in 1 2 3 4; do
		ip=$(verify_pod_rail four "net$i" "rdma$((i - 1))")
		assert_match "$ip" "^${RAIL_NET//./\\.}\\." "net$i's address from the NAD's range"
		assert_eq "$(jq -r --arg i "net$i" '.[] | select(.interface == $i) | .mac' <<<"$status")" \
			"$(in_pod four cat "/sys/class/net/net$i/address")" "network-status MAC of net$i"
	done
	# No device-info here: Multus hands a plugin a device-info path only with a deviceID (a NAD
	# with a resourceName); rails picked by cni-args have none.
	local env
	env=$(in_pod four roce-ipvlan env) || fail "roce-ipvlan env failed in the pod"
	note "env: $(tr '\n' ' ' <<<"$env")"
	assert_match "$env" 'NCCL_IB_HCA=' "env prints NCCL_IB_HCA"
	assert_match "$env" 'NCCL_IB_GID_INDEX=' "env prints NCCL_IB_GID_INDEX"
	assert_match "$env" 'UCX_NET_DEVICES=' "env prints UCX_NET_DEVICES"
}
