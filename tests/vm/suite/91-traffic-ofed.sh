# shellcheck shell=bash
# On the OFED view of the 7.x traffic kernel (docs/testing.md "The OFED view", docs/traffic.md):
# the fix (issue #15 case 2, test_traffic_ofed_fix_between_nodes) and UCX without and with an
# attachment (issue #17 case 3, test_traffic_ofed_ucx_pod_without_attachment, below).
# The fix: two pods on the two emulated nodes, attached to every rail by roce-ipvlan
# (90-traffic.sh's flat_pods), and for each rail
#   (a) the child's GID is in the pod's sysfs at the index ADD reported, on the rail's RDMA
#       device, RoCE v2; a host GID of the rail reads zero there and its type fails with EINVAL;
#   (b) the rail's device takes the child's GID for an RC QP: ib_write_bw between the pods on
#       the rails' rxe devices gets past RTR/RTS; the host GID, from the same pod, does not;
#   (c) ib_write_bw between the pods over the rail, through an rxe on each pod's child.
# 'make vm-traffic-ofed' runs them (VM_KERNEL=backports VM_RDMA=ofed). suite/run.sh leaves
# them out on the upstream view unless a pattern names them as ofed: there (a)'s zero GID and
# (b)'s host-GID control fail, which shows the test depends on the OFED check.

# shellcheck source=tests/vm/suite/90-traffic.sh disable=SC2154 # here: suite/run.sh's directory
source "$here/90-traffic.sh"
# shellcheck source=tests/vm/suite/12-ofed.sh
source "$here/12-ofed.sh" # host_gid_index, ZERO_GID, HOST_ADDRS, cleanup_host_addrs

# alias_of POD IFNAME: sets AL_DEV, AL_IDX, AL_GID from the child's ifalias (ADD's report)
alias_of() {
	local kv alias
	alias=$(in_pod "$1" cat "/sys/class/net/$2/ifalias")
	AL_DEV="" AL_IDX="" AL_GID=""
	for kv in $alias; do
		case $kv in
		rdma_dev=*) AL_DEV=${kv#*=} ;;
		gid_index=*) AL_IDX=${kv#*=} ;;
		gid=*) AL_GID=${kv#*=} ;;
		esac
	done
	[[ -n $AL_DEV && -n $AL_IDX && -n $AL_GID ]] || fail "$1 $2: alias '$alias' lacks rdma_dev, gid_index or gid"
}

# rail_bw N DEV_A IDX_A DEV_B IDX_B: ib_write_bw server in pod B on DEV_B with GID index IDX_B,
# client in pod A on DEV_A with IDX_A, out-of-band over rail N's addresses; sets CLI, CRC (the
# client's output and exit status) and SRV, SRC (the server's). 20 s each at most.
rail_bw() {
	local n=$1 port=$((18620 + $1)) spid
	in_pod podB timeout 20 stdbuf -oL ib_write_bw -d "$4" -x "$5" -n 5 -s 64 -p "$port" >/tmp/obw-srv.log 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		in_pod podB ss -ltnH "sport = :$port" | grep . >/dev/null && break
		sleep 0.1
	done
	CRC=0 SRC=0
	CLI=$(in_pod podA timeout 20 stdbuf -oL ib_write_bw -d "$2" -x "$3" -n 5 -s 64 -p "$port" "${ADDR_B[n]}" 2>&1) || CRC=$?
	wait "$spid" || SRC=$?
	SRV=$(cat /tmp/obw-srv.log)
}

ofed_traffic_cleanup() {
	local n
	for n in 0 1 2 3; do ip neigh flush dev "rdma$n" nud permanent 2>/dev/null || true; done
	cleanup_host_addrs
	traffic_cleanup
}

test_traffic_ofed_fix_between_nodes() {
	require_plugin
	trap ofed_traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	local n dev devB idx idxB hidx base GA GB r s0 r0
	assert_match "$(rdma system)" "netns shared" "RDMA netns mode"
	flat_pods
	for n in 0 1 2 3; do
		# (a) the child's GID, where ADD said, on the rail's device
		dev=$(rail_rdma_dev "rdma$n")
		alias_of podA "net$n"
		assert_eq "$AL_DEV" "$dev" "pod A net$n's reported RDMA device"
		idx=$AL_IDX base=/sys/class/infiniband/$dev/ports/1
		assert_eq "$(in_pod podA cat "$base/gids/$idx")" "$(gid_of_ipv4 "${ADDR_A[n]}")" "pod A: $dev GID $idx (net$n's)"
		assert_eq "$(in_pod podA cat "$base/gid_attrs/types/$idx")" "RoCE v2" "pod A: $dev types/$idx"
		alias_of podB "net$n"
		devB=$AL_DEV idxB=$AL_IDX
		assert_eq "$(ip netns exec podB cat "/sys/class/infiniband/$devB/ports/1/gids/$idxB")" "$(gid_of_ipv4 "${ADDR_B[n]}")" "pod B: $devB GID $idxB (net$n's)"
		# ... and a host GID of the same rail, hidden from the pod
		ip addr add "10.40.$n.1/24" dev "rdma$n"
		HOST_ADDRS+=("10.40.$n.1/24 dev rdma$n")
		hidx=$(host_gid_index "$dev" "10.40.$n.1" "rdma$n")
		assert_eq "$(in_pod podA cat "$base/gids/$hidx")" "$ZERO_GID" "pod A: $dev GID $hidx (the host's 10.40.$n.1)"
		run_cmd in_pod podA cat "$base/gid_attrs/types/$hidx"
		assert_match "$RC:$ERR" "^1:.*types/$hidx: Invalid argument" "pod A: reading $dev types/$hidx (the host's)"
		note "rail $n: pod A sees net$n's GID at ${dev}[$idx], the host's at [$hidx] as zeros/EINVAL; pod B: ${devB}[$idxB]"

		# (b) the rail's device takes the child's GID for a QP: both sides resolve the peer's MAC
		# from their own GID (ib_resolve_eth_dmac, the OFED check passes) and reach RTS; perftest
		# prints its result header only after ctx_connect moved the QP to RTR and RTS.
		in_pod podA ip route replace "${ADDR_B[n]}/32" dev "net$n" src "${ADDR_A[n]}"
		s0=$(rxe_sent "$dev") r0=$(in_pod podB cat "/sys/class/net/net$n/statistics/rx_packets")
		rail_bw "$n" "$dev" "$idx" "$devB" "$idxB"
		s0=$(($(rxe_sent "$dev") - s0)) r0=$(($(in_pod podB cat "/sys/class/net/net$n/statistics/rx_packets") - r0))
		note "rail $n on the rails' rxe: client exit $CRC, server exit $SRC: $(grep -E '#bytes|Failed|Unable|Completion' <<<"$CLI" | tr -s ' \n' ' '); $dev sent +$s0 pkts, pod B net$n rx +$r0"
		assert_no_match "$CLI$SRV" "Failed to modify QP|Unable to Connect" "ib_write_bw on the rails' rxe with the children's GIDs"
		assert_match "$CLI" "#bytes +#iterations" "ib_write_bw client on $dev past RTR/RTS (its result header)"
		assert_match "$SRV" "#bytes +#iterations" "ib_write_bw server on $devB past RTR/RTS (its result header)"
		# The data phase does not complete here, and fails no work request either: the rail's rxe
		# sends (its packets reach pod B's child), but they arrive in pod B's netns, where no rxe
		# listens on UDP 4791 (node B's rail rxe listens in node B's netns: docs/traffic.md, "Why
		# a 7.x kernel"), so nothing is acknowledged and both sides wait in the data phase until
		# timeout stops them (exit 124). On a NIC the rail's device itself carries the data;
		# here (c) does it on the pods' own rxe.
		((s0 > 0 && r0 > 0)) || fail "rail $n: $dev sent $s0 packets, pod B's net$n received $r0: expected the writes to reach pod B's netns"
		assert_eq "$CRC/$SRC" "124/124" "ib_write_bw exit status (client/server) on the rails' rxe, stopped by timeout in the data phase"
		assert_no_match "$CLI$SRV" "Completion with error|Failed status" "ib_write_bw on the rails' rxe"

		# Control: from the same pod, the host's GID on the same device fails at RTR (ENODEV from
		# the OFED check). A host route and a permanent neighbour entry for pod B's address
		# make the MAC resolvable from the host GID, so on the upstream view RTR passes.
		ip route replace "${ADDR_B[n]}/32" dev "rdma$n" src "10.40.$n.1"
		ip neigh replace "${ADDR_B[n]}" dev "rdma$n" lladdr "$(in_pod podB cat "/sys/class/net/net$n/address")" nud permanent
		rail_bw "$n" "$dev" "$hidx" "$devB" "$idxB"
		note "rail $n, host GID $hidx from pod A: client exit $CRC: $(grep -E 'Failed|Unable' <<<"$CLI" | tr '\n' ' ')"
		assert_match "$CLI" "Failed to modify QP [0-9]+ to RTR" "ib_write_bw in pod A on $dev with the host's GID $hidx"

		# (c) data between the pods over the rail, through an rxe on each pod's child
		roce_pair "$n"
		r=$(write_bw "$n")
		note "$r"
	done
}

# Issue #17 case 3, the field report's UCX failure: on the OFED view UCX in a pod without an
# attachment fails on the rail's RDMA device, and once roce-ipvlan attached the same pods, UCX
# through `env --exec` passes. Pods A and B on the two nodes, first with no netdev on any rail,
# only the emulated pod network (oob_link) for ucx_perftest's out-of-band exchange; the rail has
# a host address on each node (10.40.0.1 and .2), as on the report's hosts. UCX (UCX_JOB,
# UCX_NET_DEVICES=the rail's device in each pod, no GID setting) fails on both sides with the
# report's "Address not valid", at the step UCX 1.13 reaches here (docs/traffic.md#ucx): every
# GID's type reads EINVAL, every candidate fails UCX's ibv_create_ah test, UCX falls back to
# GID index 0, and the first UD connect's ibv_create_ah fails with ENODEV. Then the pods are
# attached to rail 0 and ucx_perftest runs through env --exec (over the pods' own rxe, as in
# 90-traffic.sh's UCX tests). On the upstream view the unattached pods use the hosts' GIDs and
# UCX passes, so the first half fails there.
# shellcheck disable=SC2034 # POD_RAILS, GA, GB, OOB_B, PT_DEV_*: read by 90-traffic.sh's helpers
test_traffic_ofed_ucx_pod_without_attachment() {
	require_plugin
	trap ofed_traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB OOB_B dev hidx PT_DEV_A PT_DEV_B cli srv
	assert_match "$(rdma system)" "netns shared" "RDMA netns mode"
	node_b_flat
	flat_new_pods
	oob_link
	dev=$(rail_rdma_dev rdma0)
	ip addr add 10.40.0.1/24 dev rdma0
	HOST_ADDRS+=("10.40.0.1/24 dev rdma0")
	ip -n nodeB addr add 10.40.0.2/24 dev rdma0 # goes with nodeB's rdma0 at cleanup
	hidx=$(host_gid_index "$dev" 10.40.0.1 rdma0)
	for _ in $(seq 100); do
		ip netns exec nodeB grep -qlx "$(gid_of_ipv4 10.40.0.2)" /sys/class/infiniband/rxeB0/ports/1/gids/* && break
		sleep 0.1
	done

	PT_DEV_A=$dev PT_DEV_B=rxeB0
	ucx_perftest_pair ofed-bare alone "${UCX_ARGS[@]}"
	cli=$(grep -E 'UCX +(ERROR|DIAG)' /tmp/ucx-cli-ofed-bare.log || true)
	srv=$(grep -E 'UCX +(ERROR|DIAG)' /tmp/ucx-srv-ofed-bare.log || true)
	note "UCX without an attachment, pod A on $dev (host GID at $hidx), pod B on rxeB0: exit $PT_RC / $PT_SRV_RC; pod A's UCX took GID index '$PT_GID'; $dev sent $PT_SENT packets"
	note "client: $(sed -E 's/^\[[^]]*\] \[[^]]*\] +//' <<<"$cli" | tr -s ' \n' ' ')"
	note "server: $(sed -E 's/^\[[^]]*\] \[[^]]*\] +//' <<<"$srv" | tr -s ' \n' ' ')"
	((PT_RC != 0 && PT_SRV_RC != 0)) || fail "UCX without an attachment on $dev exited $PT_RC (server $PT_SRV_RC), expected both to fail: the OFED view's GID check did not stop it"
	assert_match "$cli" "failed to read /sys/class/infiniband/$dev/ports/1/gid_attrs/ndevs/0: Invalid argument" "pod A's UCX reading the GID's netdev"
	assert_eq "$PT_GID" 0 "GID index pod A's UCX fell back to (no candidate passed its create_ah test; the host's is $hidx)"
	assert_match "$cli" "ibv_create_ah\([^)]* sgid_index=0 [^)]*\) for UD verbs connect on $dev failed: No such device" "pod A's UCX connecting"
	assert_match "$cli" "ucp_ep_create\(\) failed: Address not valid" "pod A's UCX endpoint"
	assert_match "$cli" "Failed to run test: Address not valid" "pod A's ucx_perftest"
	assert_match "$srv" "ibv_create_ah\([^)]* sgid_index=0 [^)]*\) for UD verbs connect on rxeB0 failed: No such device" "pod B's UCX connecting"
	assert_match "$srv" "Failed to run test: Address not valid" "pod B's ucx_perftest"
	assert_eq "$PT_SENT" 0 "packets $dev sent for pod A's UCX"

	# The same pods, attached to rail 0 by roce-ipvlan
	flat_attach '{}'
	PT_DEV_A="" PT_DEV_B=""
	ucx_pods_ready
	ucx_perftest_pair ofed-env env "${UCX_ARGS[@]}"
	ucx_passes "OFED view, the pods attached by roce-ipvlan, through env --exec"
}
