# shellcheck shell=bash
# The field report's symptom and fix under Kubernetes, on the OFED view (VM_RDMA=ofed): a pod
# with the RDMA devices but no attachment reads every RoCE GID as zero; attached, its own.

nonzero_gids() { # POD: the non-zero RoCE GIDs the pod can read, one "FILE:GID" a line
	# One grep reads every GID file (a process per file takes minutes under TCG); empty slots
	# fail to read and are skipped, so grep's status says nothing. What must hold: the exec
	# worked and the pod sees the RDMA devices' GID tables at all (the report's pods do: the
	# devices are there, their GIDs read as zero), else "reads no GIDs" would prove nothing.
	local out tables
	# shellcheck disable=SC2016 # expanded in the pod
	out=$(in_pod "$1" sh -c 'set -- /sys/class/infiniband/*/ports/*/gids/0; [ -e "$1" ] && echo "tables=$#" || echo tables=0
		grep -H . /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null; true') ||
		fail "kubectl exec in pod $1 failed"
	tables=$(sed -n '1s/^tables=//p' <<<"$out")
	((${tables:-0} > 0)) || fail "pod $1 sees no RDMA device's GID table (first line: '$(head -n 1 <<<"$out")')"
	tail -n +2 <<<"$out" | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' | grep -v ':fe80:' || true
}

# The report's symptom and its fix side by side: pod "own" is attached to two rails, pod "bare"
# has no attachment. Each reads only what its namespace holds: own its two GIDs, bare none
# (not even own's, which exist on the same devices).
test_ofed_pods_read_only_their_own_gids() {
	rail_nad ofed
	testpod own "$(networks_on_rails ofed rdma0 rdma1)"
	testpod bare '[]'
	wait_pod_ready own 300 || fail "pod own not Ready"
	wait_pod_ready bare 300 || fail "pod bare not Ready"
	local a b seen
	a=$(verify_pod_rail own net1 rdma0)
	b=$(verify_pod_rail own net2 rdma1)
	seen=$(nonzero_gids own)
	note "own reads: $(tr '\n' ' ' <<<"$seen")"
	assert_eq "$(grep -c . <<<"$seen")" 2 "non-zero GIDs the attached pod reads"
	assert_match "$seen" "$(gid_of_ipv4 "$a")" "the pod reads net1's GID"
	assert_match "$seen" "$(gid_of_ipv4 "$b")" "the pod reads net2's GID"
	seen=$(nonzero_gids bare)
	[[ -z $seen ]] || fail "a pod without attachments reads GIDs (the OFED view hides other namespaces'): $seen"
}
