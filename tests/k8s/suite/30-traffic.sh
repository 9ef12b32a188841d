# shellcheck shell=bash
# RoCE v2 between two pods on one node, over one rail: ib_write_bw from pod A's child to pod B's
# child, both IPvlan children of rdma0, each on its own GID of rxe0 (ipvlan switches between
# children of one parent; Soft-RoCE carries traffic for an address in a pod's netns only on the
# 7.x kernel, so this runs only on VM_KERNEL=backports).

# alias_field POD IFNAME KEY: one key=value of the child's ifalias
alias_field() {
	local kv
	for kv in $(in_pod "$1" cat "/sys/class/net/$2/ifalias"); do
		[[ $kv == "$3="* ]] && { echo "${kv#*=}"; return 0; }
	done
	return 1
}

test_traffic_ib_write_bw_between_pods() {
	local ipb deva gida devb gidb srv out
	rail_nad bw
	testpod bw-a "$(networks_on_rails bw rdma0)"
	testpod bw-b "$(networks_on_rails bw rdma0)"
	wait_pod_ready bw-a 300 || fail "pod bw-a not Ready"
	wait_pod_ready bw-b 300 || fail "pod bw-b not Ready"
	verify_pod_rail bw-a net1 rdma0 >/dev/null
	ipb=$(verify_pod_rail bw-b net1 rdma0)
	deva=$(alias_field bw-a net1 rdma_dev) gida=$(alias_field bw-a net1 gid_index)
	devb=$(alias_field bw-b net1 rdma_dev) gidb=$(alias_field bw-b net1 gid_index)
	kubectl exec bw-b -- timeout 90 ib_write_bw -d "$devb" -x "$gidb" -D 2 -s 65536 -F >/tmp/bw-srv.log 2>&1 &
	srv=$!
	sleep 3
	out=$(kubectl exec bw-a -- timeout 90 ib_write_bw -d "$deva" -x "$gida" -D 2 -s 65536 -F "$ipb" 2>&1) ||
		{ kill "$srv" 2>/dev/null; fail "ib_write_bw client: $out"; }
	wait "$srv" || fail "ib_write_bw server: $(cat /tmp/bw-srv.log)"
	note "$(grep -E '^ *65536' <<<"$out" | head -1)"
	grep -qE '^ *65536 +[0-9]+' <<<"$out" || fail "no bandwidth line in: $out"
}
