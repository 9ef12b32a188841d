# shellcheck shell=bash
# nv-ipam as the NVIDIA Network Operator deploys it (node.sh: its controller Deployment and node
# DaemonSet from its own deploy/ tree, in nvidia-network-operator, the one namespace it reads
# pools from): the examples' pool gives the node a block, and every address an attachment took
# returns to the node after a failed ADD and after a force delete. The pools of the failure tests
# are too small to survive a leak: the failed-ADD pool gives the node one address, so a second
# ADD gets it only if the first one's was released.

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

# probe_nv_ipam: install probe-nv-ipam (nv-ipam that records who called it with what; its
# header) as /opt/cni/bin/probe-nv-ipam with an empty record. cleanup_k8s removes it.
NV_CALLS=/run/k8s-test/nv-ipam-calls
probe_nv_ipam() {
	mkdir -p /run/k8s-test
	: >"$NV_CALLS"
	install -m 0755 "$(dirname "${BASH_SOURCE[0]}")/probe-nv-ipam" /opt/cni/bin/probe-nv-ipam
}
# finished_adds: the sandboxes whose IPAM ADD (from the plugin's ADD) got an address and whose
# plugin ADD has returned since (Multus's DEL after it reached nv-ipam), one a line, in order.
finished_adds() {
	awk '$1 == "ADD" && $2 == "ADD" && $3 == 0 {got[$5] = 1}
		$1 == "DEL" && $2 == "DEL" && got[$5] && !seen[$5]++ {print $5}' "$NV_CALLS"
}
# two_finished_adds_or_an_empty_pool: two ADDs done, or one whose IPAM ADD failed (no point in
# waiting for more).
two_finished_adds_or_an_empty_pool() {
	(($(finished_adds | wc -l) >= 2)) || awk '$1 == "ADD" && $3 != 0 {f = 1} END {exit !f}' "$NV_CALLS"
}
# sandbox_failures POD PATTERN: how many of POD's sandbox creations failed with a message
# matching PATTERN (ERE), counting the repeats the kubelet folds into one event.
sandbox_failures() {
	kubectl get events --field-selector "involvedObject.name=$1,reason=FailedCreatePodSandBox" -o json |
		jq --arg re "$2" '[.items[] | select(.message | test($re)) | .series.count // .count // 1] | add // 0'
}
GID_TIMEOUT='network "gidfail": the RoCE v2 GID [^ ]+ of net1 ' # the start of code 104's message
gid_wait_failed() { (($(sandbox_failures "$1" "$GID_TIMEOUT") > 0)); }

# ADD takes the pool's only address, then waits in vain for the GID (rdma.device is another
# rail's device): code 104, and its rollback gives the address back. Multus (its cleanup of a
# failed ADD) and containerd (its teardown of the failed sandbox) send DELs as well, which
# release it too, so the pool alone cannot tell the rollback's work: probe-nv-ipam records that
# each failed ADD made an IPAM DEL of its own (the caller's CNI_COMMAND is ADD) after which
# ipam-node held nothing for the sandbox. The kubelet's retry then gets the same one address.
test_nv_ipam_failed_add_returns_the_address() {
	local block other sandbox calls
	block=$(small_pool nvipam-one 10.224.9.0/30 1)
	probe_nv_ipam
	other=$(rail_rdma_dev rdma1)
	nad gidfail "$(jq -cn --arg dev "$other" '{cniVersion: "1.0.0", name: "gidfail", type: "roce-ipvlan",
		master: "rdma0", rdma: {device: $dev, gidTimeoutMs: 1500}, ipam: {type: "probe-nv-ipam", poolName: "nvipam-one"}}')"
	testpod gidfail1 '[{"name": "gidfail", "interface": "net1"}]'
	wait_for 150 "2 ADDs of gidfail1 through nv-ipam" two_finished_adds_or_an_empty_pool || {
		pod_debug gidfail1
		fail "gidfail1's sandbox did not reach nv-ipam and fail twice in 150 s; nv-ipam's calls: $(cat "$NV_CALLS")"
	}
	calls=$(cat "$NV_CALLS")
	note "nv-ipam's calls for gidfail1 (COMMAND CALLER RC HELD SANDBOX IFNAME), the node's one address $block:"
	cut -c1-60 <<<"$calls" | sed 's/^/      /'
	! grep -q '^ADD ADD [^0]' <<<"$calls" ||
		fail "an IPAM ADD of gidfail1 failed: the one-address pool was empty, so a failed ADD kept its address"
	for sandbox in $(finished_adds); do
		grep -q "^DEL ADD 0 0 $sandbox " <<<"$calls" ||
			fail "the failed ADD of sandbox ${sandbox:0:12} did not give its address back itself (no IPAM DEL from the ADD after which ipam-node held nothing for it): the rollback did not release it"
	done
	wait_for 30 "a sandbox failure of gidfail1 at the GID wait" gid_wait_failed gidfail1 || {
		pod_debug gidfail1
		fail "no FailedCreatePodSandBox event of gidfail1 names the GID wait (code 104)"
	}
	kubectl delete pod gidfail1 --wait=true --timeout=120s >/dev/null
	settles_to 60 "nv-ipam's reservations of gidfail1 after its deletion" 0 nv_ipam_count gidfail1
}

# A pod on two rails, force deleted (the API object goes at once; the kubelet tears the sandbox
# down after): both addresses return to the node's block, and nothing else of it is left on the
# node (children; host-local allocations and device-info files, which it has none of, unchanged).
test_nv_ipam_force_delete_returns_the_addresses() {
	local block before
	before=$(leftovers)
	block=$(small_pool nvipam-two 10.224.9.8/29 2)
	nad forcenv "$(jq -cn '{cniVersion: "1.0.0", name: "forcenv", type: "roce-ipvlan", allowedRails: ["rdma*"],
		ipam: {type: "nv-ipam", poolName: "nvipam-two"}}')"
	testpod forcenv1 "$(networks_on_rails forcenv rdma2 rdma3)"
	wait_pod_ready forcenv1 300 || { kubectl describe pod forcenv1 | tail -n 12; fail "pod forcenv1 is not Ready"; }
	nv_ipam_pod forcenv1 "$block" 2
	kubectl delete pod forcenv1 --grace-period=0 --force >/dev/null 2>&1
	wait_for 180 "the kubelet to tear forcenv1 down and nv-ipam to get its addresses back" none_for forcenv1 ||
		fail "after a force delete ipam-node still holds $(nv_ipam_reserved forcenv1 | tr '\n' ' ')for forcenv1"
	settles_to 60 "host-local allocations, device-info files, children after forcenv1's force delete" "$before" leftovers
}
