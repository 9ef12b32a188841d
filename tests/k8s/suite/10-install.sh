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

# A changed image rolled out while pods are being attached: every attachment succeeds, each ADD
# ran a whole binary (the old file or the new one), one ADD was running while the file was
# swapped, and the swap was a rename (a new inode; the old one never written). probe-ipam
# (host-local behind a hold) records each ADD's span and the inode of the plugin binary that
# called it, and holds the first ADD until the swap has happened (at most 100 s, under the
# kubelet's 2 min), so that ADD spans the swap by construction; the pods after the swap run the
# new binary.
test_rollout_replaces_the_binary_while_pods_attach() {
	local i n=4 t0=$SECONDS new old_ino new_ino old_sum swapped_at failed=0 extra
	extra=$(probe_ipam 100 until /run/k8s-test/swapped)
	rail_nad rollout "$extra"
	new=$(kubectl -n roce-ipvlan get ds roce-ipvlan-installer -o jsonpath='{.spec.template.spec.containers[0].image}')
	new=${new%:*}:rollout
	python3 -c 'import sys, urllib.request; r, t = sys.argv[1].split(":"); urllib.request.urlopen(f"http://127.0.0.1:5000/v2/{r}/manifests/{t}")' "${new#localhost/}" ||
		fail "image $new is not in the node's registry (tests/k8s/build.sh builds it)"
	old_ino=$(stat -c %i /opt/cni/bin/roce-ipvlan)
	old_sum=$(sha256sum </opt/cni/bin/roce-ipvlan | cut -d' ' -f1)
	# A second name for the old file (same filesystem): written in place, it would change too.
	ln -f /opt/cni/bin/roce-ipvlan /opt/cni/bin/roce-ipvlan-before-rollout
	# One process polls the inode (a stat and a sleep per poll would fork 20 times a second).
	python3 -c '
import os, sys, time
while True:
    try:
        if os.stat("/opt/cni/bin/roce-ipvlan").st_ino != int(sys.argv[1]):
            break
    except FileNotFoundError:
        pass
    time.sleep(0.05)
open("/run/k8s-test/swapped", "w").write("%.6f\n" % time.time())' "$old_ino" &
	local watcher=$!
	testpod rollout-0 "$(networks_on_rails rollout rdma0)"
	wait_for 180 "rollout-0's ADD to be held in its IPAM" test -d /run/k8s-test/held
	kubectl -n roce-ipvlan set image ds/roce-ipvlan-installer "install=$new" >/dev/null
	wait_for 200 "the installer to swap /opt/cni/bin/roce-ipvlan" test -e /run/k8s-test/swapped ||
		{ kill "$watcher" 2>/dev/null; fail "the binary's inode never changed: the rollout did not replace it by rename"; }
	note "swap $((SECONDS - t0)) s into the test"
	for ((i = 1; i < n; i++)); do testpod "rollout-$i" "$(networks_on_rails rollout "rdma$i")"; done
	kubectl -n roce-ipvlan rollout status ds/roce-ipvlan-installer --timeout=300s >/dev/null ||
		fail "the rollout to $new did not finish"
	swapped_at=$(cat /run/k8s-test/swapped)
	new_ino=$(stat -c %i /opt/cni/bin/roce-ipvlan)
	local deadline=$((SECONDS + 300))
	for ((i = 0; i < n; i++)); do
		wait_pod_ready "rollout-$i" $((deadline > SECONDS ? deadline - SECONDS : 1)) ||
			{ failed=$((failed + 1)); kubectl describe pod "rollout-$i" | tail -n 8; }
	done
	((failed == 0)) || fail "$failed of $n pods attached during the rollout did not become Ready"
	# The rollout image's binary is the static build with a marker appended (build.sh).
	tail -c 32 /opt/cni/bin/roce-ipvlan | grep -q 'roce-ipvlan rollout test' ||
		fail "/opt/cni/bin/roce-ipvlan is not the rolled-out image's binary"
	assert_eq "$(sha256sum </opt/cni/bin/roce-ipvlan-before-rollout | cut -d' ' -f1)" "$old_sum" \
		"the old binary's content after the swap (written in place?)"
	rm -f /opt/cni/bin/roce-ipvlan-before-rollout
	# Every ADD: which file ran it (old or new inode; both files whole, above), and whether it
	# spanned the swap.
	local n_old n_new n_bad n_over
	read -r n_old n_new n_bad n_over <<<"$(awk -v t="$swapped_at" -v o="$old_ino" -v n="$new_ino" '
		{ if ($3 == o) old++; else if ($3 == n) new++; else { bad++; print "neither binary: " $0 > "/dev/stderr" } }
		$1 < t && $2 > t { over++ }
		END { printf "%d %d %d %d", old, new, bad, over }' /run/k8s-test/adds)"
	note "$n pods, $((n_old + n_new + n_bad)) ADDs: $n_old by the old binary, $n_new by the new, $n_over spanning the swap; $((SECONDS - t0)) s"
	assert_eq "$n_bad" 0 "ADDs whose plugin binary was neither the old file nor the new one"
	((n_over > 0)) || fail "no ADD was running when the binary was swapped (swap at $swapped_at; ADDs: $(cat /run/k8s-test/adds))"
	((n_new > 0)) || fail "no ADD ran the new binary"
	((n_old + n_new >= n)) || fail "$((n_old + n_new)) ADDs recorded for $n pods"
	# No sandbox failed on the plugin: not by its name, the network's ("rollout"), a busy or
	# half-written file, or a missing one. (A Multus timeout reading the pod from the API
	# server would not name the network, and kubelet retries it.)
	local plugin_failures
	plugin_failures=$(kubectl get events --field-selector reason=FailedCreatePodSandBox -o json |
		jq -r '.items[].message | select(test("roce-ipvlan|network \\\\?\"rollout|text file busy|exec format error|failed to find plugin"))')
	[[ -z $plugin_failures ]] || fail "sandbox failures on the plugin during the rollout: $plugin_failures"
	local left
	left=$(find /opt/cni/bin -maxdepth 1 \( -name '.*' -o -name '*.tmp*' \) -printf '%f ')
	[[ -z $left ]] || fail "temporary files left in /opt/cni/bin: $left"
	# Back to the original image for the tests after this one.
	kubectl -n roce-ipvlan rollout undo ds/roce-ipvlan-installer >/dev/null
	kubectl -n roce-ipvlan rollout status ds/roce-ipvlan-installer --timeout=300s >/dev/null
	assert_eq "$(sha256sum </opt/cni/bin/roce-ipvlan)" "$(sha256sum <"$ROCE_IPVLAN_BIN")" "binary after the rollback"
}
