# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# The B300 layout: routed IPv6 rails through the rail router r. Pods on a and b take SLAAC
# addresses in their own host's /64 of each rail, report that address's GID, and move RDMA
# across r on every rail.

test_routed6_slaac_gid_reported_and_rdma_across_the_router() {
	require_plugin
	local -a DEV_A IDX_A DEV_B IDX_B ADDR_A ADDR_B f0 f1
	local POD_NET_A POD_NET_B i h prefix addr alias
	routed_pods
	rail_pairs
	for h in a b; do
		for i in 0 1 2 3; do
			prefix=$(fabric_prefix "$h" "$i")
			addr=$(slaac_addr "$h" "net1r$i")
			[[ $addr == "${prefix%::/64}":* ]] || fail "pod ${h^^}'s rail-$i address '$addr' is not in its host's $prefix"
			alias=$(child_alias "$h" "net1r$i")
			assert_eq "$(gid_long "$(alias_field "$alias" gid)")" "$(gid_long "$addr")" "GID pod ${h^^} reports on rail $i"
			assert_eq "$(on "$h" ip netns exec "pod${h^^}" cat "/sys/class/infiniband/rxe$i/ports/1/gids/$(alias_field "$alias" gid_index)")" \
				"$(gid_long "$addr")" "pod ${h^^}'s GID at the reported index on rxe$i"
		done
	done
	# shellcheck disable=SC2016 # expanded on r
	read -r -a f0 <<<"$(on r bash -c 'for i in 0 1 2 3; do printf "%s " "$(cat /sys/class/net/rb$i/statistics/tx_bytes)"; done')"
	bw_all_rails oob ib_write_bw
	# shellcheck disable=SC2016 # expanded on r
	read -r -a f1 <<<"$(on r bash -c 'for i in 0 1 2 3; do printf "%s " "$(cat /sys/class/net/rb$i/statistics/tx_bytes)"; done')"
	for i in 0 1 2 3; do
		note "rail $i: r forwarded +$((f1[i] - f0[i])) bytes to host b"
		((f1[i] - f0[i] >= BW_SIZE * BW_ITERS)) || fail "r forwarded only $((f1[i] - f0[i])) bytes to b on rail $i"
	done
}

# RDMA CM across the router: rping from pod A's SLAAC address on each rail to pod B's, at once;
# the CM's path and the data take rail i both ways.
test_routed6_rdma_cm_rping_every_rail() {
	require_plugin
	local -a DEV_A IDX_A DEV_B IDX_B ADDR_A ADDR_B a0 a1
	local POD_NET_A POD_NET_B i rc srv=() cli=()
	routed_pods
	rail_pairs
	read -r -a a0 <<<"$(rail_packets a tx)"
	for i in 0 1 2 3; do
		on b ip netns exec podB timeout 90 rping -s -a "${ADDR_B[i]}" -C 20 -S 4096 -v >"/tmp/rping-srv-$i.log" 2>&1 &
		srv+=($!)
	done
	sleep 3
	for i in 0 1 2 3; do
		in_pod podA timeout 90 rping -c -a "${ADDR_B[i]}" -I "${ADDR_A[i]}" -C 20 -S 4096 -v >"/tmp/rping-cli-$i.log" 2>&1 &
		cli+=($!)
	done
	for i in 0 1 2 3; do
		rc=0
		wait "${cli[i]}" || rc=$?
		((rc == 0)) || fail "rping on rail $i exited $rc: $(tail -n 5 "/tmp/rping-cli-$i.log" | tr '\n' ' ')"
		wait "${srv[i]}" || fail "rping server on rail $i: $(tail -n 5 "/tmp/rping-srv-$i.log" | tr '\n' ' ')"
		grep -q 'ping data: rdma-ping-19' "/tmp/rping-cli-$i.log" || fail "rping on rail $i printed no 20th ping"
	done
	read -r -a a1 <<<"$(rail_packets a tx)"
	for i in 0 1 2 3; do
		note "rail $i: rping ${ADDR_A[i]} -> ${ADDR_B[i]}: 20 pings of 4 KiB; host a rdma$i sent +$((a1[i] - a0[i])) packets"
		((a1[i] - a0[i] >= 80)) || fail "host a's rail $i sent only $((a1[i] - a0[i])) packets for its rping"
	done
}
