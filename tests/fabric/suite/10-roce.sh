# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# RoCE v2 between a pod on host a and a pod on host b, on every rail at once, through the GID
# index ADD wrote into each child's ifalias; each rail's NIC counters on both hosts show that
# rail's pair and nothing else. RDMA CM: ib_send_bw -R on flat (perftest 4.5's RDMA CM takes
# IPv4 addresses only), rping on routed6. On routed6 the ib_write_bw of every rail at once is
# part of 30-routed6.sh's test.

test_flat_roce_write_bw_every_rail_at_once() {
	require_plugin
	local -a DEV_A IDX_A DEV_B IDX_B ADDR_A ADDR_B
	local POD_NET_A POD_NET_B
	fabric_pods
	rail_pairs
	bw_all_rails oob ib_write_bw
}

test_flat_roce_send_bw_rdma_cm_every_rail_at_once() {
	require_plugin
	local -a DEV_A IDX_A DEV_B IDX_B ADDR_A ADDR_B
	local POD_NET_A POD_NET_B
	fabric_pods
	rail_pairs
	bw_all_rails cm ib_send_bw
}
