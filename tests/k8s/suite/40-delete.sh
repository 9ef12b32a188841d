# shellcheck shell=bash
# containerd restarting in the middle of an attachment leaves nothing on the node. (A deletion
# leaving nothing is checked where pods are deleted: test_pod_gid_indexes_in_its_object, the
# force delete in test_nv_ipam_force_delete_returns_the_addresses, and after each pod of the
# other tests.)

# containerd goes away while the plugin's ADD is inside IPAM (probe-ipam holds the first ADD
# 20 s, and the test waits for it to be held), so the restart lands in the attachment, never
# after it: the orphaned ADD, kubelet's new sandbox and the DELs must still leave nothing.
test_containerd_restart_mid_attach() {
	local before extra
	before=$(leftovers)
	extra=$(probe_ipam 20 once)
	rail_nad restart "$extra"
	testpod restart1 "$(networks_on_rails restart rdma0 rdma1 rdma2)"
	wait_for 180 "restart1's first ADD to be held in its IPAM" test -d /run/k8s-test/held
	[[ ! -s /run/k8s-test/adds ]] || fail "an ADD finished before containerd was stopped: $(cat /run/k8s-test/adds)"
	pgrep -x roce-ipvlan >/dev/null || fail "no roce-ipvlan process while its ADD is held in IPAM"
	kill "$(cat "$K8S_LOGS/containerd.pid")"
	sleep 1
	[[ ! -s /run/k8s-test/adds ]] || fail "the held ADD finished before containerd was gone; the restart did not land inside it"
	note "containerd stopped while ADD $(ls /run/k8s-test) was held"
	daemon containerd --config /run/k8s/containerd.toml
	wait_for 120 "containerd to answer" ctr version
	wait_pod_ready restart1 400 || { kubectl describe pod restart1 | tail -n 12; fail "restart1 not Ready after the containerd restart"; }
	verify_pod_rail restart1 net3 rdma2 >/dev/null
	note "ADDs: $(awk '{print $4}' /run/k8s-test/adds | sort | uniq -c | tr -s ' \n' ' ')"
	kubectl delete pod restart1 --wait=true --timeout=120s >/dev/null
	settles_to 120 "host-local allocations, device-info files, children after containerd restarted mid-attachment and the pod was deleted" \
		"$before" leftovers
}
