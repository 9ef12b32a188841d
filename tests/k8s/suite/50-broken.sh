# shellcheck shell=bash
# A NAD that names no rail: the pod stays in ContainerCreating, its events carry the plugin's own
# message (what was expected, what to do), and nothing is left behind.

test_broken_nad_shows_the_plugin_message() {
	local before msg
	before="$(host_local_count) $(devinfo_count) $(children_count)"
	nad broken '{"cniVersion": "1.0.0", "name": "broken", "type": "roce-ipvlan", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.57.0.0/24"}]]}}'
	testpod broken1 '[{"name": "broken", "interface": "net1"}]'
	wait_for 180 "a FailedCreatePodSandBox event" bash -c \
		"kubectl get events --field-selector involvedObject.name=broken1,reason=FailedCreatePodSandBox -o name | grep -q ."
	msg=$(kubectl describe pod broken1)
	note "$(grep -m1 FailedCreatePodSandBox <<<"$msg" | cut -c1-400)"
	assert_eq "$(kubectl get pod broken1 -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}')" ContainerCreating \
		"broken1's container state"
	assert_match "$msg" 'roce-ipvlan' "the event names the plugin"
	assert_match "$msg" '[Nn]o rail|master' "the event says which rail is missing"
	kubectl delete pod broken1 --wait=true --timeout=120s >/dev/null
	assert_eq "$(host_local_count) $(devinfo_count) $(children_count)" "$before" "what the failed attachments left"
}
