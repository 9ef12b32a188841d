# shellcheck shell=bash
# roce-ipvlan ready (plugin/src/tools/ready.rs): the installer DaemonSet's readiness probe, on a real
# kernel with Soft-RoCE rails. Read-only; run here as the probe runs on a node with
# hostNetwork: in the host's network namespace. Ready means the plugin is installed and
# answers; rail health gates it only for the rails --rails names. And `install --wait`, which
# logs that report when it changes, and `uninstall`.

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
	cp "$CNI_BIN_DIR/roce-ipvlan" "$READY_DIR/roce-ipvlan"
	chmod 0644 "$READY_DIR/roce-ipvlan"
	assert_fails ready --to "$READY_DIR"
	assert_match "$OUT" "is this image's but does not answer CNI_COMMAND=VERSION" "a copy Multus cannot exec"
	assert_fails ready --rails nosuchrail --to "$CNI_BIN_DIR"
	assert_match "$OUT" 'rail nosuchrail has no RDMA port' "a named rail without RDMA port"
}

test_ready_rail_down() {
	require_plugin
	installed_copy
	trap 'ip link set rdma2 up; cleanup_pods' EXIT
	ip link set rdma2 down
	# Not named by --rails: reported, but the installer stays Ready (an unused port must not
	# stall the DaemonSet's rollout).
	assert_ok ready --to "$READY_DIR"
	assert_match "$OUT" '^ready: the plugin is installed and answers' "verdict without --rails"
	assert_match "$OUT" 'rail health \(does not gate readiness without --rails\): ' "rail health reported"
	assert_match "$OUT" 'rail rdma2 is down: pods already on it have no connectivity' "the rail, in STATUS's words"
	assert_no_match "$OUT" 'rail rdma1' "healthy rails are not reported"
	assert_ok ready --to "$READY_DIR" --rails rdma0,rdma1
	assert_fails ready --to "$READY_DIR" --rails rdma1,rdma2
	assert_match "$OUT" '^not ready: ' "a rail named by --rails gates readiness"
	assert_match "$OUT" 'rail rdma2 is down' "named rail"
	ip link set rdma2 up
	ready_port_state "$(rail_rdma_dev rdma2)" ACTIVE
	assert_ok ready --to "$READY_DIR" --rails rdma1,rdma2
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
	assert_ok ready --to "$READY_DIR"
	assert_match "$OUT" 'rail rdyrail \(rxerdy port 1\) is 1: DOWN, not ACTIVE' "reported without --rails"
	assert_fails ready --to "$READY_DIR" --rails rdyrail
	assert_match "$OUT" 'rail rdyrail \(rxerdy port 1\) is 1: DOWN, not ACTIVE' "the port, in diagnose's words"
	assert_no_match "$OUT" 'rail rdyrail is down' "the netdev itself is up"
	ip link set rdyrailp up
	ready_port_state rxerdy ACTIVE
	assert_ok ready --to "$READY_DIR" --rails rdyrail
	assert_eq "$OUT" "ready: rails rdyrail" "ACTIVE again"
}

# log_lines LOG PATTERN: how many lines of LOG match the ERE PATTERN
log_lines() { grep -cE "$2" "$1" || true; }

# poll_log LOG PATTERN COUNT: up to 20 s for COUNT lines of LOG to match PATTERN
poll_log() {
	for _ in $(seq 200); do
		(($(log_lines "$1" "$2") >= $3)) && return 0
		sleep 0.1
	done
	fail "expected $3 line(s) matching '$2' in the installer's log: $(cat "$1")"
}

# install --wait logs the readiness report when it changes (a rail going down and coming back),
# and keeps the binary installed; uninstall removes it and --check says so.
test_install_logs_rail_health_and_uninstall_removes() {
	require_plugin
	local dir log lines
	dir=$(mktemp -d)
	log=$(mktemp)
	trap 'kill "$INSTALLER_PID" 2>/dev/null || true; ip link set rdma2 up; cleanup_pods' EXIT
	"$CNI_BIN_DIR/roce-ipvlan" install --to "$dir" --wait --interval 1 >"$log" 2>&1 &
	INSTALLER_PID=$!
	poll_log "$log" '^ready: rails' 1
	ip link set rdma2 down
	ready_port_state "$(rail_rdma_dev rdma2)" DOWN
	poll_log "$log" 'rail rdma2 \(.*\) is 1: DOWN' 1
	lines=$(wc -l <"$log")
	sleep 2.5 # two more checks: an unchanged report is not logged again
	assert_eq "$(wc -l <"$log")" "$lines" "logged on change only, not every interval"
	ip link set rdma2 up
	ready_port_state "$(rail_rdma_dev rdma2)" ACTIVE
	poll_log "$log" '^ready: rails' 2
	assert_eq "$(log_lines "$log" '^not ready')" 0 "the down rail did not make it unready"
	kill "$INSTALLER_PID"
	wait "$INSTALLER_PID" 2>/dev/null || true
	assert_match "$(cat "$log")" 'SIGTERM: exiting' "exits on SIGTERM"
	assert_ok test -x "$dir/roce-ipvlan"
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" uninstall --to "$dir" --check
	assert_ok "$CNI_BIN_DIR/roce-ipvlan" uninstall --to "$dir"
	assert_eq "$OUT" "removed $dir/roce-ipvlan" "uninstall says what it removed"
	assert_ok "$CNI_BIN_DIR/roce-ipvlan" uninstall --to "$dir" --check
	assert_fails ready --to "$dir"
	assert_match "$OUT" 'is missing' "ready after uninstall"
}
