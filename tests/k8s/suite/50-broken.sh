# shellcheck shell=bash
# A NAD that names no rail: the pod stays in ContainerCreating, its events carry the plugin's own
# message (what was expected, what to do), and nothing is left behind.

sandbox_events() { # POD: the messages of its FailedCreatePodSandBox events, one a line
	kubectl get events --field-selector "involvedObject.name=$1,reason=FailedCreatePodSandBox" \
		-o jsonpath='{range .items[*]}{.message}{"\n"}{end}'
}

sandbox_event_names() { # POD NAD: one of its sandbox events names the NAD
	sandbox_events "$1" | grep -qE "network \\\\?\"$2\\\\?\""
}

test_broken_nad_shows_the_plugin_message() {
	local before msg
	before=$(leftovers)
	nad broken '{"cniVersion": "1.0.0", "name": "broken", "type": "roce-ipvlan", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.57.0.0/24"}]]}}'
	testpod broken1 '[{"name": "broken", "interface": "net1"}]'
	# The kubelet retries a failed sandbox with backoff and records each failure as an event. An
	# early one may carry a passing fault of the busy node instead (Multus's "error waiting for pod"
	# when the API server is slow): wait for the event of the attachment itself, by the NAD's name.
	# The event's message itself (kubectl describe also holds the pod's image, which is named after
	# the plugin): Multus's "error adding container to network" with the NAD's name, then the
	# plugin's own message, which says what it expected.
	wait_for 300 "a FailedCreatePodSandBox event naming the NAD" sandbox_event_names broken1 broken
	msg=$(sandbox_events broken1 | grep -m1 -E 'network \\?"broken\\?"' || sandbox_events broken1 | tail -n1)
	note "${msg:0:400}"
	assert_eq "$(kubectl get pod broken1 -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}')" ContainerCreating \
		"broken1's container state"
	# (A quote may reach the event escaped, hence the optional backslashes.)
	assert_match "$msg" 'network \\?"broken\\?"' "the event names the NAD"
	assert_match "$msg" 'no rail named: expected \\?"master\\?" \(a netdev such as rdma3\)' \
		"the event carries the plugin's message, naming what is missing"
	kubectl delete pod broken1 --wait=true --timeout=120s >/dev/null
	settles_to 60 "host-local allocations, device-info files, children the failed attachments left" "$before" leftovers
}
