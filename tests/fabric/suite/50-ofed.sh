# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# The field report's symptom and its fix across two hosts, on the OFED view (VM_RDMA=ofed):
# a pod with the RDMA devices and only the cluster network reads every GID of the rail as zero
# and cannot move its QP to RTR against a peer on the other host; attached by roce-ipvlan, the
# same command passes.

test_fabric_ofed_unattached_pod_fails_rtr_attached_passes() {
	require_plugin
	local POD_NET_A POD_NET_B host_idx f out rc srv alias
	new_pods
	# Pod B (host b) is attached and serves; pod A is not attached yet.
	attach b "$(fabric_conf_file b)" net1 >/dev/null
	alias=$(child_alias b net1r0)
	f=$(grep -lx "$(gid_of_ipv4 "$(fabric_addr a 0)")" /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null) ||
		f=$(grep -lx "$(gid_long "$(fabric_addr a 0)")" /sys/class/infiniband/rxe0/ports/1/gids/*) ||
		fail "host a's own GID is not on rxe0"
	host_idx=${f##*/}
	out=$(in_pod podA sh -c 'cat /sys/class/infiniband/rxe0/ports/1/gids/*')
	(($(wc -l <<<"$out") >= 16)) || fail "pod A read only $(wc -l <<<"$out") GID slots of rxe0"
	assert_eq "$(grep -vxc '0000:0000:0000:0000:0000:0000:0000:0000' <<<"$out" || true)" 0 \
		"GIDs of rxe0 pod A reads as non-zero without an attachment (the host's is at $host_idx)"
	on b ip netns exec podB timeout 60 ib_write_bw -d rxe0 -x "$(alias_field "$alias" gid_index)" -s 65536 -n 50 -F >/tmp/ofed-srv.log 2>&1 &
	srv=$!
	sleep 3
	rc=0
	out=$(in_pod podA timeout 60 ib_write_bw -d rxe0 -x "$host_idx" -s 65536 -n 50 -F "$POD_NET_B" 2>&1) || rc=$?
	on b pkill -f 'ib_write_bw -d rxe0' || true
	wait "$srv" || true
	note "unattached pod A, host GID index $host_idx: exit $rc: $(grep -m1 -E 'Failed|Unable' <<<"$out")"
	((rc != 0)) || fail "ib_write_bw from an unattached pod passed on the OFED view: $out"
	assert_match "$out" 'Failed to modify QP [0-9]+ to RTR' "the unattached pod's failure"
	# The fix: the same pod attached, the same command with the index from its ifalias.
	attach a "$(fabric_conf_file a)" net1 >/dev/null
	alias=$(child_alias a net1r0)
	# A port of its own: the first server may still hold 18515 while it goes.
	on b ip netns exec podB timeout 60 ib_write_bw -d rxe0 -x "$(alias_field "$(child_alias b net1r0)" gid_index)" -s 65536 -n 50 -F -p 18600 >/tmp/ofed-srv.log 2>&1 &
	srv=$!
	sleep 5
	assert_ok in_pod podA timeout 60 ib_write_bw -d rxe0 -x "$(alias_field "$alias" gid_index)" -s 65536 -n 50 -F -p 18600 "$POD_NET_B"
	wait "$srv" || fail "ib_write_bw server in pod B: $(tail -n 5 /tmp/ofed-srv.log)"
	note "attached pod A, GID index $(alias_field "$alias" gid_index): $(grep -E '^ *65536 ' <<<"$OUT")"
}
