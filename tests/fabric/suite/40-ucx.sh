# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# UCX between the pods, as a job starts it: ucx_perftest through `roce-ipvlan env --exec`, which
# sets UCX's devices and GID index from the pod's own ifaliases. The out-of-band exchange takes
# the cluster network. On routed6 with a placeholder pool, UCX left alone takes the
# placeholder's GID and fails (the field report's trap); through env --exec it passes.

# What the job itself sets; env --exec adds the device and GID settings. UCX_TLS: RC for the
# data, UD for UCP's wireup (UCX 1.13 has no other auxiliary transport for RC), no shared memory
# or TCP. UCX_UD_ETH_DGID_CHECK=n: Soft-RoCE's UD packets fail UCX's destination GID check.
UCX_JOB=("UCX_TLS=rc_verbs,ud_verbs" UCX_UD_ETH_DGID_CHECK=n UCX_UD_TIMEOUT=10s)
UCX_ARGS=(-t ucp_put_bw -s 65536 -n 100 -w 5)
UCX_PORT=13411

# ucx_pair NAME PRE...: ucx_perftest server in pod B and client in pod A, each started by
# PRE (a command prefix, e.g. "roce-ipvlan env --exec --"); sets UCX_RC, UCX_SRV_RC, UCX_OUT,
# UCX_SENT (bytes host a's rails sent during the run)
ucx_pair() {
	local name=$1 srv a0 a1 i
	shift
	read -r -a a0 <<<"$(rail_bytes a tx)"
	on b ip netns exec podB env "${UCX_JOB[@]}" timeout 120 "$@" ucx_perftest -p "$UCX_PORT" >"/tmp/ucx-srv-$name.log" 2>&1 &
	srv=$!
	sleep 3
	UCX_RC=0 UCX_SRV_RC=0
	in_pod podA env "${UCX_JOB[@]}" timeout 120 "$@" ucx_perftest "$POD_NET_B" -p "$UCX_PORT" "${UCX_ARGS[@]}" \
		>"/tmp/ucx-cli-$name.log" 2>&1 || UCX_RC=$?
	((UCX_RC == 0)) || on b pkill -f "ucx_perftest -p $UCX_PORT" || true
	wait "$srv" || UCX_SRV_RC=$?
	read -r -a a1 <<<"$(rail_bytes a tx)"
	UCX_SENT=0
	for i in 0 1 2 3; do UCX_SENT=$((UCX_SENT + a1[i] - a0[i])); done
	UCX_OUT=$(grep -vE '^\|' "/tmp/ucx-cli-$name.log" | tail -n 8)
}

ucx_passes() {
	local want=$((65536 * 100))
	((UCX_RC == 0 && UCX_SRV_RC == 0)) || fail "$1: ucx_perftest exited $UCX_RC (server $UCX_SRV_RC): $UCX_OUT; server: $(tail -n 4 /tmp/ucx-srv-*.log | tr '\n' ' ')"
	grep -qE '^Final:' "/tmp/ucx-cli-$2.log" || fail "$1: no Final line: $UCX_OUT"
	((UCX_SENT >= want)) || fail "$1: host a's rails sent $UCX_SENT bytes for $want of data: UCX's data did not take the rails"
	note "$1: $(grep -E '^Final:' "/tmp/ucx-cli-$2.log" | awk '{print $6 " MB/s"}'); host a's rails sent $UCX_SENT bytes"
}

test_fabric_ucx_through_env_exec() {
	require_plugin
	local POD_NET_A POD_NET_B UCX_RC UCX_SRV_RC UCX_OUT UCX_SENT
	fabric_pods
	note "pod A: $(in_pod podA "$CNI_BIN_DIR/roce-ipvlan" env | grep '^export' | tr '\n' ' ')"
	ucx_pair env "$CNI_BIN_DIR/roce-ipvlan" env --exec --
	ucx_passes "UCX through env --exec ($FABRIC_LAYOUT)" env
}

test_routed6_ucx_placeholder_trap() {
	require_plugin
	local POD_NET_A POD_NET_B UCX_RC UCX_SRV_RC UCX_OUT UCX_SENT chosen
	routed_pods placeholder
	# UCX on rail 0 with no GID setting, as a job without env's settings runs it.
	ucx_pair alone env UCX_NET_DEVICES=rxe0:1 UCX_LOG_LEVEL=debug
	chosen=$(grep -oE 'rxe0:1 using gid_index [0-9]+' /tmp/ucx-cli-alone.log | awk '{print $NF}' | head -n 1 || true)
	note "UCX alone: GID index ${chosen:-?} ($(in_pod podA cat "/sys/class/infiniband/rxe0/ports/1/gids/${chosen:-0}" 2>/dev/null)), exit $UCX_RC"
	[[ -n $chosen ]] || fail "UCX alone named no GID index: $UCX_OUT"
	[[ $(gid_long "$(alias_field "$(child_alias a net1r0)" gid)") != "$(in_pod podA cat "/sys/class/infiniband/rxe0/ports/1/gids/$chosen")" ]] ||
		fail "UCX alone took the SLAAC GID (index $chosen): the trap is gone (docs/traffic.md#ucx must change)"
	((UCX_RC != 0)) || fail "UCX alone on GID index $chosen passed: the trap is gone"
	ucx_pair env "$CNI_BIN_DIR/roce-ipvlan" env --exec --
	ucx_passes "UCX through env --exec with a placeholder (routed6)" env
}
