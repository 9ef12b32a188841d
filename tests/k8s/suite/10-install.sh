# shellcheck shell=bash
# The installer DaemonSet (deploy/, applied by node.sh as `kubectl apply -k` of it with the
# node's image): the binary where Multus looks, and a rollout that replaces it atomically.

test_installer_put_the_binary_in_place() {
	local pod
	pod=$(kubectl -n roce-ipvlan get pods -l app.kubernetes.io/component=cni-installer -o name)
	[[ -n $pod ]] || fail "no installer pod"
	assert_eq "$(kubectl -n roce-ipvlan get "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" True \
		"the installer pod's Ready condition"
	[[ -x /opt/cni/bin/roce-ipvlan ]] || fail "/opt/cni/bin/roce-ipvlan is missing or not executable"
	assert_eq "$(stat -c %a /opt/cni/bin/roce-ipvlan)" 755 "mode of /opt/cni/bin/roce-ipvlan"
	assert_eq "$(sha256sum </opt/cni/bin/roce-ipvlan)" "$(sha256sum <"$ROCE_IPVLAN_BIN")" \
		"/opt/cni/bin/roce-ipvlan is the image's binary (the static build)"
	assert_match "$(CNI_COMMAND=VERSION /opt/cni/bin/roce-ipvlan </dev/null)" '"supportedVersions"' "CNI VERSION answer"
}

# A changed image rolled out while pods are being attached: every attachment succeeds (the
# plugin file is swapped by rename, never written in place) and the new binary ends up in place.
test_rollout_replaces_the_binary_while_pods_attach() {
	local i n=6 new failed=0
	rail_nad rollout
	new=$(kubectl -n roce-ipvlan get ds roce-ipvlan-installer -o jsonpath='{.spec.template.spec.containers[0].image}')
	new=${new%:*}:rollout
	python3 -c 'import sys, urllib.request; r, t = sys.argv[1].split(":"); urllib.request.urlopen(f"http://127.0.0.1:5000/v2/{r}/manifests/{t}")' "${new#localhost/}" ||
		fail "image $new is not in the node's registry (tests/k8s/build.sh builds it)"
	for ((i = 0; i < n; i++)); do
		testpod "rollout-$i" "$(networks_on_rails rollout "rdma$((i % 4))")"
		if ((i == 1)); then
			kubectl -n roce-ipvlan set image ds/roce-ipvlan-installer "install=$new" >/dev/null
		fi
	done
	kubectl -n roce-ipvlan rollout status ds/roce-ipvlan-installer --timeout=300s >/dev/null ||
		fail "the rollout to $new did not finish"
	local deadline=$((SECONDS + 300))
	for ((i = 0; i < n; i++)); do
		wait_pod_ready "rollout-$i" $((deadline > SECONDS ? deadline - SECONDS : 1)) ||
			{ failed=$((failed + 1)); kubectl describe pod "rollout-$i" | tail -n 8; }
	done
	((failed == 0)) || fail "$failed of $n pods attached during the rollout did not become Ready"
	# No attachment failed on the plugin: a half-written binary, a busy one or none at all would
	# show in a sandbox failure naming roce-ipvlan. (On a loaded node Multus itself may time out
	# reading the pod from the API server; kubelet retries those, and the pods got Ready above.)
	local plugin_failures
	plugin_failures=$(kubectl get events --field-selector reason=FailedCreatePodSandBox -o json |
		jq -r '.items[].message | select(test("roce-ipvlan|text file busy|exec format error|failed to find plugin"))')
	[[ -z $plugin_failures ]] || fail "sandbox failures on the plugin during the rollout: $plugin_failures"
	# The rollout image's binary is the static build with a marker appended (build.sh).
	tail -c 32 /opt/cni/bin/roce-ipvlan | grep -q 'roce-ipvlan rollout test' ||
		fail "/opt/cni/bin/roce-ipvlan is not the rolled-out image's binary"
	local left
	left=$(find /opt/cni/bin -maxdepth 1 \( -name '.*' -o -name '*.tmp*' \) -printf '%f ')
	[[ -z $left ]] || fail "temporary files left in /opt/cni/bin: $left"
	note "$n pods attached during the rollout to $new"
	# Back to the original image for the tests after this one.
	kubectl -n roce-ipvlan rollout undo ds/roce-ipvlan-installer >/dev/null
	kubectl -n roce-ipvlan rollout status ds/roce-ipvlan-installer --timeout=300s >/dev/null
	assert_eq "$(sha256sum </opt/cni/bin/roce-ipvlan)" "$(sha256sum <"$ROCE_IPVLAN_BIN")" "binary after the rollback"
}
