# shellcheck shell=bash
# nv-ipam as the NVIDIA Network Operator deploys it (node.sh: its controller Deployment and node
# DaemonSet from its own deploy/ tree, in nvidia-network-operator, the one namespace it reads
# pools from): the examples' pool gives the node a block, and every address an attachment took
# returns to the node after a failed ADD and after a force delete. The pools of the failure tests
# are too small to survive a leak: the failed-ADD pool gives the node one address, so a second
# ADD finds it free only if the first one's was released.

# small_pool NAME SUBNET BLOCK_SIZE: an IPPool of the tests' own (no node selector) in nv-ipam's
# namespace; waits for the node's block and prints it ("START END").
small_pool() {
	kubectl apply -f - >/dev/null <<YAML
apiVersion: nv-ipam.nvidia.com/v1alpha1
kind: IPPool
metadata: { name: $1, namespace: $NV_IPAM_NS }
spec: { subnet: $2, perNodeBlockSize: $3 }
YAML
	wait_for 180 "the node's block of $1" node_block "$1" >/dev/null ||
		fail "no block of $1 for $K8S_NODE: $(kubectl -n "$NV_IPAM_NS" get ippool "$1" -o jsonpath='{.status}')"
	node_block "$1"
}

# sandbox_failures POD PATTERN: how many of POD's sandbox creations failed with a message
# matching PATTERN (ERE), counting the repeats the kubelet folds into one event.
sandbox_failures() {
	kubectl get events --field-selector "involvedObject.name=$1,reason=FailedCreatePodSandBox" -o json |
		jq --arg re "$2" '[.items[] | select(.message | test($re)) | .series.count // .count // 1] | add // 0'
}
# gid_failures_or_empty_pool POD N: POD's sandbox failed N times at the GID wait, or once because
# the pool was empty (then there is no point in waiting for more).
gid_failures_or_empty_pool() {
	(($(sandbox_failures "$1" "$GID_TIMEOUT") >= $2 || $(sandbox_failures "$1" "$NO_FREE") > 0))
}
GID_TIMEOUT='RoCE v2 GID did not appear' # code 104's message
NO_FREE='no free addresses'              # nv-ipam's, for a pool without a free address
none_for() { [[ $(nv_ipam_count "$1") == 0 ]]; }

test_nv_ipam_gives_the_node_a_block_of_the_example_pool() {
	local block start end
	block=$(example_pool)
	read -r start end <<<"$block"
	note "rdma-rail-pool (examples/a100-ippool.yaml, 10.224.128.0/17): $K8S_NODE has $start - $end"
	{ in_block "$start" 10.224.128.0 10.224.255.255 && in_block "$end" 10.224.128.0 10.224.255.255; } ||
		fail "the node's block $block is not in the pool's subnet 10.224.128.0/17"
	assert_eq "$(($(ip4_int "$end") - $(ip4_int "$start") + 1))" 256 "the block's size (the pool's perNodeBlockSize)"
	assert_eq "$(kubectl -n "$NV_IPAM_NS" get pods -l name=nv-ipam-node \
		-o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}')" True "ipam-node's pod Ready"
	[[ -x /opt/cni/bin/nv-ipam ]] || fail "ipam-node did not install its CNI as /opt/cni/bin/nv-ipam"
	[[ -S /var/lib/cni/nv-ipam/daemon.sock ]] || fail "no ipam-node socket /var/lib/cni/nv-ipam/daemon.sock"
}

# ADD takes the pool's only address, then waits in vain for the GID (rdma.device is another
# rail's device): code 104, and the rollback releases the address. The kubelet retries the
# sandbox; each retry must find the address free again, so the ADDs keep failing at the GID wait,
# never at nv-ipam's "no free IP". (Multus's cleanup and the runtime's DEL after a failed sandbox
# release it too; the rollback alone is vm-rust's failpoint tests'.)
test_nv_ipam_failed_add_returns_the_address() {
	local block other
	block=$(small_pool nvipam-one 10.224.9.0/30 1)
	other=$(rail_rdma_dev rdma1)
	nad gidfail "$(jq -cn --arg dev "$other" '{cniVersion: "1.0.0", name: "gidfail", type: "roce-ipvlan",
		master: "rdma0", rdma: {device: $dev, gidTimeoutMs: 1500}, ipam: {type: "nv-ipam", poolName: "nvipam-one"}}')"
	testpod gidfail1 '[{"name": "gidfail", "interface": "net1"}]'
	wait_for 420 "3 ADDs of gidfail1 failing at the GID wait" gid_failures_or_empty_pool gidfail1 3 || {
		kubectl get events --field-selector involvedObject.name=gidfail1 -o jsonpath='{range .items[*]}{.count} {.message}{"\n"}{end}' |
			cut -c1-400 | tail -n 4 >&2
		fail "gidfail1's ADDs did not fail 3 times at the GID wait"
	}
	note "ADDs of gidfail1 failed at the GID wait: $(sandbox_failures gidfail1 "$GID_TIMEOUT"), on an empty pool: $(sandbox_failures gidfail1 "$NO_FREE") (the node's one address: $block)"
	assert_eq "$(sandbox_failures gidfail1 "$NO_FREE")" 0 "ADDs of gidfail1 that found the one-address pool empty"
	# Between two retries the address is free (an ADD in flight holds it for 1.5 s).
	wait_for 60 "gidfail1's address back in the pool" none_for gidfail1 ||
		fail "ipam-node still holds $(nv_ipam_reserved gidfail1) for gidfail1 after its failed ADDs"
	kubectl delete pod gidfail1 --wait=true --timeout=120s >/dev/null
	assert_eq "$(nv_ipam_count gidfail1)" 0 "nv-ipam's reservations of gidfail1 after its deletion"
}

# A pod on two rails, force deleted (the API object goes at once; the kubelet tears the sandbox
# down after): both addresses return to the node's block.
test_nv_ipam_force_delete_returns_the_addresses() {
	local block
	block=$(small_pool nvipam-two 10.224.9.8/29 2)
	nad forcenv "$(jq -cn '{cniVersion: "1.0.0", name: "forcenv", type: "roce-ipvlan", allowedRails: ["rdma*"],
		ipam: {type: "nv-ipam", poolName: "nvipam-two"}}')"
	testpod forcenv1 "$(networks_on_rails forcenv rdma2 rdma3)"
	wait_pod_ready forcenv1 300 || { kubectl describe pod forcenv1 | tail -n 12; fail "pod forcenv1 is not Ready"; }
	nv_ipam_pod forcenv1 "$block" 2
	kubectl delete pod forcenv1 --grace-period=0 --force >/dev/null 2>&1
	wait_for 180 "the kubelet to tear forcenv1 down and nv-ipam to get its addresses back" none_for forcenv1 ||
		fail "after a force delete ipam-node still holds $(nv_ipam_reserved forcenv1 | tr '\n' ' ')for forcenv1"
	assert_eq "$(children_count)" 0 "ipvlan children after the force delete"
}
