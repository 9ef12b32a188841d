# shellcheck shell=bash
# The field report's symptom and fix under Kubernetes, on the OFED view (VM_RDMA=ofed): a pod
# with the RDMA devices but no attachment reads every RoCE GID as zero; attached, its own.

nonzero_gids() { # POD: the non-zero RoCE GIDs the pod can read, one "dev/port/index gid" a line
	# shellcheck disable=SC2016 # expanded in the pod
	in_pod "$1" sh -c 'for f in /sys/class/infiniband/*/ports/*/gids/*; do g=$(cat "$f" 2>/dev/null) || continue; case $g in 0000:0000:0000:0000:0000:0000:0000:0000|fe80:*) ;; *) echo "$f $g" ;; esac; done'
}

test_ofed_pod_without_attachment_reads_zero_gids() {
	testpod bare '[]'
	wait_pod_ready bare 300 || fail "pod bare not Ready"
	local seen
	seen=$(nonzero_gids bare)
	[[ -z $seen ]] || fail "a pod without attachments reads GIDs (the OFED view hides other namespaces'): $seen"
	# The node itself sees the rails' GIDs: the view hides them from the pod, they exist.
	grep -l ':ffff:' /sys/class/infiniband/*/ports/*/gids/* >/dev/null 2>&1 || fail "the node has no IPv4 RoCE GIDs at all"
}

test_ofed_attached_pod_reads_its_own_gids() {
	rail_nad ofed
	testpod own "$(networks_on_rails ofed rdma0 rdma1)"
	wait_pod_ready own 300 || fail "pod own not Ready"
	local a b seen
	a=$(verify_pod_rail own net1 rdma0)
	b=$(verify_pod_rail own net2 rdma1)
	seen=$(nonzero_gids own)
	assert_eq "$(wc -l <<<"$seen")" 2 "non-zero GIDs the attached pod reads ($seen)"
	assert_match "$seen" "$(gid_of_ipv4 "$a")" "the pod reads net1's GID"
	assert_match "$seen" "$(gid_of_ipv4 "$b")" "the pod reads net2's GID"
}
