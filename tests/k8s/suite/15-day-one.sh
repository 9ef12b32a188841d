# shellcheck shell=bash
# Day one on a cluster (docs/deploy.md): the installer stays Ready while a RoCE port it does not
# own is down, and stays on a node that gets a taint nobody told it about.

installer_ready() {
	[[ $(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer \
		-o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}') == True ]]
}

test_installer_stays_ready_with_a_rail_down() {
	local period
	period=$(kubectl -n roce-ipvlan get ds roce-ipvlan-installer -o jsonpath='{.spec.template.spec.containers[0].readinessProbe.periodSeconds}')
	ip link set ens1f0np0 down
	# Two probe periods and a little: a failing probe would have turned the pod NotReady.
	sleep $((2 * ${period:-30} + 5))
	local ready=0
	installer_ready && ready=1
	ip link set ens1f0np0 up
	((ready)) || fail "the installer pod went NotReady while ens1f0np0 (a RoCE port no NAD uses) was down"
	kubectl -n roce-ipvlan logs ds/roce-ipvlan-installer | grep -q 'ens1f0np0' ||
		fail "the installer's log does not mention the rail that was down"
}

test_installer_tolerates_a_foreign_taint() {
	local uid
	uid=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer -o jsonpath='{.items[0].metadata.uid}')
	kubectl taint node "$K8S_NODE" example.com/maintenance=soon:NoExecute >/dev/null
	sleep 20
	local now
	now=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer -o jsonpath='{.items[0].metadata.uid}')
	kubectl taint node "$K8S_NODE" example.com/maintenance- >/dev/null
	assert_eq "$now" "$uid" "the installer pod (uid) after a NoExecute taint it does not know"
	installer_ready || fail "the installer is not Ready after the taint"
}
