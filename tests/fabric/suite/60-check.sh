# shellcheck shell=bash
# shellcheck disable=SC2034 # POD_NET_*: set and read by lib.sh's helpers
# `roce-ipvlan fabric-check`, the check users run (docs/troubleshooting.md#fabric-check), between
# pod A and pod B: on this layout every rail works, RDMA over the wire included (ibv_rc_pingpong
# at each child's GID index); on flat with pod B attached as a bare ipvlan leaves it (no ARP
# sysctls, no source routing) the check names the rails that fail and why.

CHECK_PORT=18720

# check_serve: fabric-check serve in pod B, in the background (check_stop ends it)
check_serve() {
	on b bash -c "ip netns exec podB timeout 900 $CNI_BIN_DIR/roce-ipvlan fabric-check serve --port $CHECK_PORT >/tmp/fabric-serve.log 2>&1 &"
	sleep 2
}
check_stop() { on b pkill -f "fabric-check serve --port $CHECK_PORT" || true; }

# check_run: fabric-check from pod A against pod B's cluster-network address; sets CHECK_RC and
# CHECK_JSON
check_run() {
	CHECK_RC=0
	CHECK_JSON=$(in_pod podA "$CNI_BIN_DIR/roce-ipvlan" fabric-check "$POD_NET_B" --port "$CHECK_PORT" --json) || CHECK_RC=$?
	note "fabric-check (exit $CHECK_RC): $(jq -c '[.rails[] | {interface, works, why}]' <<<"$CHECK_JSON")"
}

test_fabric_check_every_rail_works() {
	require_plugin
	local POD_NET_A POD_NET_B CHECK_RC CHECK_JSON
	fabric_pods
	check_serve
	check_run
	check_stop
	assert_eq "$CHECK_RC" 0 "fabric-check's exit status"
	assert_eq "$(jq '.working' <<<"$CHECK_JSON")/$(jq '.rails | length' <<<"$CHECK_JSON")" 4/4 "rails fabric-check found working"
	assert_eq "$(jq '[.rails[].checks[] | select(.[0] == "rdma" and (.[1] | startswith("ibv_rc_pingpong over")))] | length' <<<"$CHECK_JSON")" 4 \
		"rails whose RDMA check ran and passed"
}

# The check's failures are real: pod B as a bare ipvlan answers every rail's SYN by its first
# rail, so three rails fail at "reach" (the same three the ARP tests' control shows astray), and
# the one left works.
test_flat_fabric_check_names_the_rails_a_bare_ipvlan_breaks() {
	require_plugin
	local POD_NET_A POD_NET_B CHECK_RC CHECK_JSON
	new_pods
	attach a "$(flat_conf a '{}')" net1 >/dev/null
	attach b "$(flat_conf b '{"arpSysctls": false, "sourceRouting": false}')" net1 >/dev/null
	check_serve
	check_run
	check_stop
	assert_eq "$CHECK_RC" 1 "fabric-check's exit status with rails failing"
	assert_eq "$(jq '.working' <<<"$CHECK_JSON")" 1 "rails that work with pod B bare (its first rail)"
	assert_eq "$(jq -r '[.rails[] | select(.works | not) | .why | split(":")[0]] | unique | join(",")' <<<"$CHECK_JSON")" reach \
		"the check that fails on the other rails"
	assert_match "$(jq -r '[.rails[] | select(.works | not) | .why][0]' <<<"$CHECK_JSON")" 'no answer within 3 s' \
		"the reason given"
}
