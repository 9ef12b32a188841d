# shellcheck shell=bash
# The attachment record (plugin/src/attach/pod_record.rs): what a successful ADD leaves in
# /run/roce-ipvlan/attachments for the installer to publish as the pod's roce-ipvlan.io/gids
# annotation. Written only with the Kubernetes CNI_ARGS, holding the GID index the pod's GID
# table shows; removed by DEL and GC; never left by a failed ADD.

RECORDS=/run/roce-ipvlan/attachments
REC_UID=0b6e2a3c-7d1f-4e0a-9c55-3f2d1e0a9b88

k8s_args() { # k8s_args CONTAINER_ID: CNI_ARGS as containerd (and Multus, to its delegates) pass them
	echo "IgnoreUnknown=1;K8S_POD_NAMESPACE=ml;K8S_POD_NAME=trainer-0;K8S_POD_INFRA_CONTAINER_ID=$1;K8S_POD_UID=$REC_UID"
}

test_pod_record_holds_the_gid_index_and_goes_with_del() {
	require_plugin
	local rec=$RECORDS/rec-1_net1.json cidr info dev port idx
	roce_conf /tmp/rec.conf rec rdma2 1.0.0 10.9.40.0/24
	new_pod rec
	assert_ok cnidriver add /tmp/rec.conf /run/netns/rec --container-id rec-1 --args "$(k8s_args rec-1)"
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment rec net1 rdma2 "$cidr")
	read -r dev port idx _ <<<"$info"
	[[ -f $rec ]] || fail "no record $rec after ADD: $(ls -la "$RECORDS" 2>&1)"
	note "record: $(cat "$rec")"
	assert_eq "$(jq -c .pod "$rec")" "{\"namespace\":\"ml\",\"name\":\"trainer-0\",\"uid\":\"$REC_UID\"}" "record's pod"
	assert_eq "$(jq -r '[.network, .containerID, .ifname] | join(" ")' "$rec")" "rec rec-1 net1" "record's attachment"
	assert_eq "$(jq '.rails | length' "$rec")" 1 "record's children"
	assert_eq "$(jq -r '.rails[0] | [.interface, .rail, .device, .port] | join(" ")' "$rec")" "net1 rdma2 $dev $port" \
		"record's child, rail, RDMA device and port"
	assert_eq "$(jq -r '.rails[0].gidIndex' "$rec")" "$idx" "record's GID index (the GID table in the pod has the child's GID there)"
	assert_eq "$(jq -r '.rails[0].gid' "$rec")" "$(in_pod rec cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx")" \
		"record's GID, as the pod's GID table prints it"
	assert_eq "$(jq -r '.rails[0].addresses | join(" ")' "$rec")" "$cidr" "record's addresses"
	assert_eq "$(stat -c %a "$rec")" 600 "record's mode (only the annotator, root, reads it)"
	assert_ok cnidriver del /tmp/rec.conf /run/netns/rec --container-id rec-1 --args "$(k8s_args rec-1)"
	[[ ! -e $rec ]] || fail "record $rec left after DEL"
	assert_ok cnidriver del /tmp/rec.conf /run/netns/rec --container-id rec-1 --args "$(k8s_args rec-1)"
}

# Plain libcni (podman, nerdctl): no pod object, no record.
test_pod_record_none_without_kubernetes_args() {
	require_plugin
	roce_conf /tmp/recnone.conf recnone rdma2 1.0.0 10.9.41.0/24
	new_pod recnone
	assert_ok cnidriver add /tmp/recnone.conf /run/netns/recnone --container-id recnone-1
	[[ ! -e $RECORDS/recnone-1_net1.json ]] || fail "a record without K8S_POD_* arguments: $(cat "$RECORDS/recnone-1_net1.json")"
	assert_ok cnidriver del /tmp/recnone.conf /run/netns/recnone --container-id recnone-1
}

# A failed ADD (the GID never appears: 104, after the child, IPAM, sysctls and rules) leaves no
# record, and a second ADD refused for an attachment that exists leaves the first one's record.
test_pod_record_none_after_a_failed_add() {
	require_plugin
	local other
	other=$(rail_rdma_dev rdma0)
	roce_conf /tmp/recfail.conf recfail rdma1 1.0.0 10.9.42.0/24 "{\"rdma\": {\"device\": \"$other\", \"gidTimeoutMs\": 1500}}"
	new_pod recfail
	assert_fails cnidriver add /tmp/recfail.conf /run/netns/recfail --container-id recfail-1 --args "$(k8s_args recfail-1)"
	assert_eq "$(cni_code "$OUT")" 104 "error code when the GID never appears (stdout: $OUT)"
	[[ ! -e $RECORDS/recfail-1_net1.json ]] || fail "a failed ADD left its record"

	roce_conf /tmp/rectwice.conf rectwice rdma1 1.0.0 10.9.43.0/24
	new_pod rectwice
	assert_ok cni_exec_args "$(k8s_args rectwice-1)" ADD /tmp/rectwice.conf /run/netns/rectwice net1 rectwice-1
	local before
	before=$(cat "$RECORDS/rectwice-1_net1.json")
	assert_fails cni_exec_args "$(k8s_args rectwice-1)" ADD /tmp/rectwice.conf /run/netns/rectwice net1 rectwice-1
	assert_eq "$(cat "$RECORDS/rectwice-1_net1.json")" "$before" "the record after a second, refused ADD"
	assert_ok cni_exec_args "$(k8s_args rectwice-1)" DEL /tmp/rectwice.conf /run/netns/rectwice net1 rectwice-1
	[[ ! -e $RECORDS/rectwice-1_net1.json ]] || fail "record left after DEL"
}

# A multi-rail attachment: one entry per child, each with the index its ifalias (and the pod's
# GID table) names. GC removes the records of its network's attachments that are not valid.
test_pod_record_multirail_and_gc() {
	require_plugin
	local rec=$RECORDS/recmr-1_net1.json i child alias idx
	jq -n --argjson limits "$VM_TIMEOUTS" '{cniVersion: "1.1.0", name: "recmr", type: "roce-ipvlan",
		rails: ["rdma0", "rdma3"], ipam: {type: "host-local", subnet: "10.9.44.0/24"}} + $limits' >/tmp/recmr.conf
	new_pod recmr
	assert_ok cnidriver add /tmp/recmr.conf /run/netns/recmr --container-id recmr-1 --args "$(k8s_args recmr-1)"
	assert_eq "$(jq -r '[.rails[] | .interface + "@" + .rail] | join(" ")' "$rec")" "net1r0@rdma0 net1r1@rdma3" \
		"record's children and rails"
	for i in 0 1; do
		child=net1r$i
		alias=$(in_pod recmr cat "/sys/class/net/$child/ifalias")
		idx=$(jq -r ".rails[$i].gidIndex" "$rec")
		assert_match "$alias" "gid_index=$idx " "$child's index in the record and in its ifalias ($alias)"
	done
	# GC keeps a valid attachment's record, removes a stale one of its network, leaves other
	# networks' records alone. Through libcni: the stale record's attachment is not in its cache,
	# so libcni DELs nothing and the plugin's GC alone removes the record.
	cp "$rec" "$RECORDS/stale-1_net1.json"
	jq '.network = "othernet" | .containerID = "other-1"' "$rec" >"$RECORDS/other-1_net1.json"
	sed -i 's/"containerID":"recmr-1"/"containerID":"stale-1"/' "$RECORDS/stale-1_net1.json"
	assert_ok cnidriver gc /tmp/recmr.conf --valid recmr-1/net1
	[[ -e $rec ]] || fail "GC removed the valid attachment's record"
	[[ ! -e $RECORDS/stale-1_net1.json ]] || fail "GC left a stale record of its network"
	[[ -e $RECORDS/other-1_net1.json ]] || fail "GC removed another network's record"
	rm -f "$RECORDS/other-1_net1.json"
	assert_ok cnidriver del /tmp/recmr.conf /run/netns/recmr --container-id recmr-1 --args "$(k8s_args recmr-1)"
	[[ ! -e $rec ]] || fail "record left after DEL"
}

cni_exec_args() { # cni_exec_args CNI_ARGS ADD|CHECK|DEL CONF NETNS [IFNAME] [CONTAINER_ID]
	local args=$1
	shift
	CNI_ARGS=$args cni_exec "$@"
}
