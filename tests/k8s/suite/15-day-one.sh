# shellcheck shell=bash
# Day one on a cluster (docs/deploy.md): the installer stays Ready while a RoCE port it does not
# own is down, and stays on a node that gets a taint nobody told it about; a pod's GID indexes
# are in its object, and its deletion (kubelet → containerd → Multus → DEL) leaves nothing on
# the node.

# nv-ipam's node pod (its DaemonSet tolerates no foreign taint): its uid, nothing when it is gone
# or going (deleted, its containers still stopping).
ipam_node_uid() {
	kubectl -n "$NV_IPAM_NS" get pods --no-headers \
		-o custom-columns=N:.metadata.name,U:.metadata.uid,D:.metadata.deletionTimestamp |
		awk '$1 ~ /^nv-ipam-node-ds-/ && $3 == "<none>" {print $2}'
}

installer_ready() {
	[[ $(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer \
		-o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# The DaemonSet's probe has no --rails (deploy/base): ens1f0np0, a RoCE port no NAD here uses,
# must not gate readiness. That the pod stays Ready proves something only if the probe sees the
# port down: the same probe naming the port (--rails, what an operator who lists the rails
# gets) must say not ready, and the installer's log must report the port from the moment it
# went down (a line logged before, such as the start-up rail list, does not count). Meanwhile
# the node carries a NoExecute taint nobody told the installer about: it tolerates every taint,
# so the same pod (its uid) must still be there at the end, while nv-ipam's node pod, which does
# not, is evicted (the taint was in force). One wait serves both.
test_installer_stays_ready_with_a_rail_down_and_a_foreign_taint() {
	local period before probe rc=0 ready=0 logged uid now ipam_uid ipam_now
	period=$(kubectl -n roce-ipvlan get ds roce-ipvlan-installer -o jsonpath='{.spec.template.spec.containers[0].readinessProbe.periodSeconds}')
	installer_ready || fail "the installer is not Ready before the test"
	uid=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer -o jsonpath='{.items[0].metadata.uid}')
	before=$(kubectl -n roce-ipvlan logs ds/roce-ipvlan-installer -c install | wc -l)
	ipam_uid=$(ipam_node_uid)
	ip link set ens1f0np0 down
	kubectl taint node "$K8S_NODE" example.com/maintenance=soon:NoExecute >/dev/null
	# Two probe periods and a little (the installer re-checks every 60 s and logs changes): a
	# failing probe would have turned the pod NotReady, an eviction would have replaced it.
	sleep $((2 * ${period:-30} + 5))
	installer_ready && ready=1
	now=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer -o jsonpath='{.items[0].metadata.uid}')
	ipam_now=$(ipam_node_uid)
	probe=$(kubectl -n roce-ipvlan exec ds/roce-ipvlan-installer -c install -- \
		/roce-ipvlan ready --to /host/opt/cni/bin --rails ens1f0np0 2>&1) || rc=$?
	logged=$(kubectl -n roce-ipvlan logs ds/roce-ipvlan-installer -c install | tail -n +$((before + 1)))
	kubectl taint node "$K8S_NODE" example.com/maintenance- >/dev/null
	ip link set ens1f0np0 up
	# The taint evicted the pods that do not tolerate it (nv-ipam's, sriovdp's): the tests after
	# this one start on a cluster as node.sh left it, not among their DaemonSets' new pods (whose
	# cluster-network addresses a check of the node's allocations would count).
	cluster_ready "$K8S_NODE" || fail "the cluster was not ready again after the taint was removed"
	note "ready --rails ens1f0np0 (exit $rc): $(head -n 2 <<<"$probe" | tr '\n' ' ')"
	[[ -n $ipam_uid && $ipam_now != "$ipam_uid" ]] ||
		fail "nv-ipam's node pod (uid '$ipam_uid' before) was not evicted: the NoExecute taint was not in force"
	assert_eq "$now" "$uid" "the installer pod (uid) after a NoExecute taint it does not know"
	((ready)) || fail "the installer pod went NotReady while ens1f0np0 (a RoCE port no NAD uses) was down"
	assert_eq "$rc" 1 "exit status of 'ready --rails ens1f0np0' while ens1f0np0 was down"
	assert_match "$probe" 'rail ens1f0np0 is down' "what 'ready --rails ens1f0np0' says"
	assert_match "$logged" 'rail ens1f0np0 is down' "the installer's log after ens1f0np0 went down"
}

# gids_of POD: the pod's roce-ipvlan.io/gids annotation once it lists N children (the installer
# reads the plugin's records every 3 s), else whatever it is after a minute.
gids_of() {
	local pod=$1 n=$2 gids _
	for _ in $(seq 30); do
		gids=$(kubectl get pod "$pod" -o jsonpath='{.metadata.annotations.roce-ipvlan\.io/gids}')
		[[ -n $gids && $(jq 'length' <<<"$gids" 2>/dev/null) == "$n" ]] && break
		sleep 2
	done
	echo "$gids"
}

# check_gids POD GIDS RAIL...: each netN's entry names its rail, the rail's RDMA device, and the
# index at which the pod's own GID table (read in the pod) has the GID of netN's address, the
# index its ifalias names too.
check_gids() {
	local pod=$1 gids=$2 i=1 rail ifn ip entry dev port idx alias
	shift 2
	for rail in "$@"; do
		ifn=net$i
		ip=$(verify_pod_rail "$pod" "$ifn" "$rail")
		entry=$(jq -c --arg i "$ifn" '.[] | select(.interface == $i)' <<<"$gids")
		[[ -n $entry ]] || fail "roce-ipvlan.io/gids of $pod has no entry for $ifn: $gids"
		dev=$(jq -r .device <<<"$entry") port=$(jq -r .port <<<"$entry") idx=$(jq -r .gidIndex <<<"$entry")
		assert_eq "$(jq -r .rail <<<"$entry")" "$rail" "$pod/$ifn's rail in the annotation"
		assert_eq "$dev" "$(rail_rdma_dev "$rail")" "$pod/$ifn's RDMA device in the annotation"
		assert_eq "$(in_pod "$pod" cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx")" "$(gid_of_ipv4 "$ip")" \
			"the GID at the annotation's index $idx of $dev port $port, read in $pod"
		assert_eq "$(jq -r .gid <<<"$entry")" "$(gid_of_ipv4 "$ip")" "$pod/$ifn's GID in the annotation"
		alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
		assert_match "$alias" "gid_index=$idx " "$pod/$ifn's ifalias names the annotation's index"
		i=$((i + 1))
	done
}

test_pod_gid_indexes_in_its_object() {
	local gids uid before
	before=$(leftovers)
	rail_nad gids
	testpod gidpod "$(networks_on_rails gids rdma1 rdma2)"
	wait_pod_ready gidpod 300 || { kubectl describe pod gidpod | tail -n 15; fail "pod 'gidpod' is not Ready"; }
	[[ $(host_local_count) -ge $((${before%% *} + 2)) ]] ||
		fail "expected 2 more host-local allocations while gidpod runs, found $(host_local_count) (before: ${before%% *})"
	gids=$(gids_of gidpod 2)
	note "roce-ipvlan.io/gids: $gids"
	if [[ -z $gids ]]; then
		kubectl -n roce-ipvlan logs ds/roce-ipvlan-installer -c annotate | tail -n 20
		fail "pod gidpod has no roce-ipvlan.io/gids annotation (the annotate container's log is above)"
	fi
	check_gids gidpod "$gids" rdma1 rdma2
	kubectl get pod gidpod -o yaml | grep -q 'roce-ipvlan.io/gids:' || fail "kubectl get pod -o yaml shows no roce-ipvlan.io/gids"

	# A pod recreated under the same name shows its own sandbox's GIDs, never the old one's.
	uid=$(kubectl get pod gidpod -o jsonpath='{.metadata.uid}')
	kubectl delete pod gidpod --grace-period=1 --wait=true --timeout=120s >/dev/null
	# The pod's host-local allocations, device-info files and children went with it.
	settles_to 60 "host-local allocations, device-info files, ipvlan children after gidpod's deletion" "$before" leftovers
	testpod gidpod "$(networks_on_rails gids rdma3)"
	wait_pod_ready gidpod 300 || { kubectl describe pod gidpod | tail -n 15; fail "pod 'gidpod' (recreated) is not Ready"; }
	[[ $(kubectl get pod gidpod -o jsonpath='{.metadata.uid}') != "$uid" ]] || fail "the pod was not recreated"
	gids=$(gids_of gidpod 1)
	note "recreated: roce-ipvlan.io/gids: $gids"
	check_gids gidpod "$gids" rdma3
	[[ -z $(find /run/roce-ipvlan/attachments -name '*.json' -exec grep -l "$uid" {} + 2>/dev/null) ]] ||
		fail "an attachment record of the deleted pod (uid $uid) is left on the node"
	if kubectl -n roce-ipvlan logs ds/roce-ipvlan-installer -c annotate | grep 'roce-ipvlan annotate:'; then
		fail "the installer logged annotation errors (above)"
	fi
}
