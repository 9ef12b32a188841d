# shellcheck shell=bash
# roce-ipvlan ready (plugin/src/tools/ready.rs): the installer DaemonSet's readiness probe, on a real
# kernel with Soft-RoCE rails. Read-only; run here as the probe runs on a node with
# hostNetwork: in the host's network namespace.

ready() { "$CNI_BIN_DIR/roce-ipvlan" ready "$@"; }

# ready_port_state DEV STATE: up to 10 s for RDMA port 1 of DEV to report STATE
ready_port_state() {
	for _ in $(seq 100); do
		[[ $(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null) == *"$2"* ]] && return 0
		sleep 0.1
	done
	fail "port 1 of $1 is '$(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null)', expected $2"
}

# installed_copy: a CNI directory holding this binary, as the installer leaves it
installed_copy() {
	READY_DIR=$(mktemp -d)
	cp "$CNI_BIN_DIR/roce-ipvlan" "$READY_DIR/"
}

test_ready_on_a_healthy_node() {
	require_plugin
	installed_copy
	assert_ok ready --to "$READY_DIR"
	local list
	list=$(tr ' ' '\n' <<<"$VM_RAILS" | sort | paste -sd, - | sed 's/,/, /g')
	assert_eq "$OUT" "ready: rails $list" "every Soft-RoCE rail checked, the bare NIC not"
	assert_ok ready --to "$READY_DIR" --rails rdma1,rdma3
	assert_eq "$OUT" "ready: rails rdma1, rdma3" "--rails restricts the check"
	rm "$READY_DIR/roce-ipvlan"
	assert_fails ready --to "$READY_DIR"
	assert_match "$OUT" "the plugin binary $READY_DIR/roce-ipvlan is missing" "missing binary"
	printf 'old\n' >"$READY_DIR/roce-ipvlan"
	assert_fails ready --to "$READY_DIR"
	assert_match "$OUT" "roce-ipvlan is not this image's" "changed binary"
	assert_fails ready --rails nosuchrail --to "$CNI_BIN_DIR"
	assert_match "$OUT" 'rail nosuchrail has no RDMA port' "a named rail without RDMA port"
}

test_ready_rail_down() {
	require_plugin
	installed_copy
	trap 'ip link set rdma2 up; cleanup_pods' EXIT
	ip link set rdma2 down
	assert_fails ready --to "$READY_DIR"
	assert_match "$OUT" '^not ready: ' "verdict"
	assert_match "$OUT" 'rail rdma2 is down: pods already on it have no connectivity' "the rail, in STATUS's words"
	assert_no_match "$OUT" 'rail rdma1' "healthy rails are not reported"
	ip link set rdma2 up
	ready_port_state "$(rail_rdma_dev rdma2)" ACTIVE
	assert_ok ready --to "$READY_DIR"
}

# Up, but without carrier: a veth whose peer is down, so Soft-RoCE reports its port DOWN while
# the netdev is administratively up (as in the STATUS test).
test_ready_port_not_active() {
	require_plugin
	installed_copy
	trap 'rdma link del rxerdy 2>/dev/null; ip link del rdyrail 2>/dev/null; cleanup_pods' EXIT
	ip link add rdyrail type veth peer name rdyrailp
	ip link set rdyrail up
	rdma link add rxerdy type rxe netdev rdyrail
	ready_port_state rxerdy DOWN
	assert_fails ready --to "$READY_DIR"
	assert_match "$OUT" 'rail rdyrail \(rxerdy port 1\) is 1: DOWN, not ACTIVE' "the port, in diagnose's words"
	assert_no_match "$OUT" 'rail rdyrail is down' "the netdev itself is up"
	ip link set rdyrailp up
	ready_port_state rxerdy ACTIVE
	assert_ok ready --to "$READY_DIR" --rails rdyrail
	assert_eq "$OUT" "ready: rails rdyrail" "ACTIVE again"
}
