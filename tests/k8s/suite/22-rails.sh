# shellcheck shell=bash
# One attachment for many rails (examples/pod-16-rails-one-nad.yaml's NAD, "rails": ["rdma*"]):
# one network selection element, one ADD, a child per rail (net1r0 ... net1r3 on the node's four
# rails), and what Multus makes of a result with several sandbox interfaces. Its IPAM is the
# example's, nv-ipam with examples/a100-ippool.yaml: one address per child from the node's block,
# all released when the pod goes.

test_one_attachment_for_all_rails() {
	local status i ifn block
	block=$(example_pool)
	example_nad examples/pod-16-rails-one-nad.yaml rdma-all-rails
	testpod all-rails '[{"name": "rdma-all-rails", "interface": "net1"}]'
	wait_pod_ready all-rails 300 || { kubectl describe pod all-rails | tail -n 15; fail "pod all-rails is not Ready"; }
	status=$(netstatus all-rails)
	note "network-status: $(jq -c '[.[] | {name, interface, ips}]' <<<"$status")"
	# Multus 4 (CreateNetworkStatuses) lists each sandbox interface of the result on its own.
	assert_eq "$(jq -c '[.[] | select(.name == "default/rdma-all-rails") | .interface]' <<<"$status")" \
		'["net1r0","net1r1","net1r2","net1r3"]' "the rails attachment's entries in network-status"
	for i in 0 1 2 3; do
		ifn=net1r$i
		verify_pod_rail all-rails "$ifn" "rdma$i" >/dev/null
	done
	nv_ipam_pod all-rails "$block" 4
	local env
	env=$(in_pod all-rails roce-ipvlan env) || fail "roce-ipvlan env failed in the pod"
	# The NCCL_IB_HCA line itself names each rail's device (=~ on the whole output would let a
	# later line, UCX_NET_DEVICES, stand in for it).
	local hca dev
	hca=$(grep -m1 'NCCL_IB_HCA=' <<<"$env") || fail "roce-ipvlan env prints no NCCL_IB_HCA: $env"
	for i in 0 1 2 3; do
		dev=$(rail_rdma_dev "rdma$i")
		assert_match "$hca" "[=,^]$dev(:[0-9]+)?([,'\"]|\$)" "NCCL_IB_HCA names rdma$i's device $dev"
	done
	kubectl delete pod all-rails --wait=true --timeout=120s >/dev/null
	settles_to 60 "nv-ipam's reservations and children after the pod's deletion" "0 0" \
		counts "nv_ipam_count all-rails" children_count
}
