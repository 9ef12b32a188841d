# shellcheck shell=bash
# Pod deletion (kubelet → containerd → Multus → DEL) leaves nothing on the node: children,
# host-local allocations, device-info files; also after a force delete and after containerd
# restarts in the middle of an attachment.

baseline() { echo "$(host_local_count) $(devinfo_count) $(children_count)"; }
back_to() { [[ $(baseline) == "$1" ]]; } # for wait_for, which runs its command again each try

test_delete_leaves_nothing() {
	local before
	before=$(baseline)
	rail_nad del
	testpod del1 "$(networks_on_rails del rdma0 rdma1)"
	wait_pod_ready del1 300 || fail "pod del1 not Ready"
	[[ $(host_local_count) -ge 2 ]] || fail "expected 2 host-local allocations while del1 runs, found $(host_local_count)"
	kubectl delete pod del1 --wait=true --timeout=120s >/dev/null
	assert_eq "$(baseline)" "$before" "host-local allocations, device-info files, ipvlan children after delete"
}

test_force_delete_leaves_nothing() {
	local before
	before=$(baseline)
	rail_nad force
	testpod force1 "$(networks_on_rails force rdma2 rdma3)"
	wait_pod_ready force1 300 || fail "pod force1 not Ready"
	kubectl delete pod force1 --grace-period=0 --force >/dev/null 2>&1
	# The API object goes at once; kubelet tears the sandbox down after.
	wait_for 300 "kubelet to tear force1 down" back_to "$before" ||
		fail "after a force delete: expected '$before' (allocations devinfo children), found '$(baseline)'"
}

# containerd goes away while the plugin's ADD is inside IPAM (probe-ipam holds the first ADD
# 20 s, and the test waits for it to be held), so the restart lands in the attachment, never
# after it: the orphaned ADD, kubelet's new sandbox and the DELs must still leave nothing.
test_containerd_restart_mid_attach() {
	local before extra
	before=$(baseline)
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
	wait_for 120 "nothing left of restart1" back_to "$before" ||
		fail "after containerd restarted mid-attachment and the pod was deleted: expected '$before', found '$(baseline)'"
}
