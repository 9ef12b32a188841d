# shellcheck shell=bash
# One attachment for many rails (NAD "rails", rail.rs and add.rs): one IPvlan child per matching
# rail, named <CNI_IFNAME>r<N> in rail order, set up concurrently, undone together.

# mr_conf FILE NAME RAILS_JSON [EXTRA_JSON]: host-local, "rails" instead of "master"
mr_conf() {
	jq -n --arg name "$2" --argjson rails "$3" --argjson extra "${4:-{\}}" --argjson limits "$VM_TIMEOUTS" \
		'{cniVersion: "1.1.0", name: $name, type: "roce-ipvlan", rails: $rails,
		  ipam: {type: "host-local", subnet: "10.9.90.0/24"}} + $limits + $extra' >"$1"
}

pod_links() { in_pod "$1" ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | tr '\n' ' '; }

# mr_nothing_left POD NETNAME: only lo in the pod, no rules, no host-local allocation
mr_nothing_left() {
	assert_eq "$(pod_links "$1")" "lo " "links left in $1"
	assert_eq "$(count_lines 'lookup 1[0-9]{4}' in_pod "$1" ip -4 rule show)" 0 \
		"source rules left in $1"
	assert_eq "$(host_local_ips "$2")" "" "host-local allocations of $2"
}

test_multirail_four_ipv4_rails_by_glob() {
	require_plugin
	local res=/tmp/mr4.result i child rail dev idx ip addr want_dev devs=()
	mr_conf /tmp/mr4.conf mr4 '["rdma*"]'
	new_pod mr4
	in_pod mr4 sysctl -qw net.ipv4.conf.all.rp_filter=1
	assert_ok cni_exec ADD /tmp/mr4.conf /run/netns/mr4 net1
	echo "$OUT" >"$res"
	assert_eq "$(jq '.interfaces | length' "$res")" 4 "interfaces in the result: $(cat "$res")"
	assert_eq "$(jq '[.interfaces[] | select(.sandbox == "/run/netns/mr4")] | length' "$res")" 4 \
		"sandbox interfaces"
	assert_eq "$(jq -r '[.interfaces[].name] | join(" ")' "$res")" "net1r0 net1r1 net1r2 net1r3" \
		"child names in rail order"
	assert_eq "$(jq '.ips | length' "$res")" 4 "addresses in the result"
	assert_eq "$(jq '.roce | length' "$res")" 4 "roce entries in the result"
	for i in 0 1 2 3; do
		child=net1r$i rail=rdma$i
		assert_eq "$(jq ".ips[$i].interface" "$res")" "$i" "ips[$i].interface"
		addr=$(jq -r ".ips[$i].address" "$res")
		ip=${addr%/*}
		assert_eq "$(in_pod mr4 cat "/sys/class/net/$child/iflink")" "$(cat "/sys/class/net/$rail/ifindex")" \
			"$child's lower device is $rail"
		assert_match "$(in_pod mr4 ip -4 -o addr show dev "$child")" "inet ${addr//./\\.} " "$child has $addr"
		assert_eq "$(in_pod mr4 cat "/proc/sys/net/ipv4/conf/$child/arp_ignore")" 1 "$child arp_ignore"
		want_dev=$(rail_rdma_dev "$rail")
		dev=$(jq -r ".roce[$i].rdmaDevice" "$res") idx=$(jq -r ".roce[$i].gidIndex" "$res")
		assert_eq "$dev" "$want_dev" "roce[$i].rdmaDevice is $rail's"
		assert_eq "$(jq ".roce[$i].interface" "$res")" "$i" "roce[$i].interface"
		assert_eq "$(find_gid mr4 "$dev" 1 "$ip" "$child")" "$idx" "GID of $child on $dev, seen from the pod"
		assert_match "$(in_pod mr4 cat "/sys/class/net/$child/ifalias")" \
			"^rdma_dev=$dev port=1 gid_index=$idx gid=[^ ]+ attachment=net1$" "$child ifalias"
		devs+=("$dev")
		note "$child on $rail: $addr, $dev gid_index $idx"
	done
	assert_eq "$(printf '%s\n' "${devs[@]}" | sort -u | wc -l)" 4 "four different RDMA devices"
	assert_eq "$(in_pod mr4 cat /proc/sys/net/ipv4/conf/all/rp_filter)" 0 "pod all.rp_filter"
	# env finds every rail through the ifaliases, unchanged.
	assert_ok in_pod mr4 "$CNI_BIN_DIR/roce-ipvlan" env
	for dev in "${devs[@]}"; do assert_match "$OUT" "$dev" "env lists $dev"; done

	jq --slurpfile r "$res" '. + {prevResult: $r[0]}' /tmp/mr4.conf >/tmp/mr4.prev
	assert_ok cni_exec CHECK /tmp/mr4.prev /run/netns/mr4 net1
	# CHECK looks at every child, not only the first.
	in_pod mr4 ip addr flush dev net1r3
	assert_fails cni_exec CHECK /tmp/mr4.prev /run/netns/mr4 net1
	assert_eq "$(cni_code "$OUT")" 107 "CHECK with net1r3's address gone"
	assert_match "$OUT" "net1r3" "CHECK names the child"

	assert_ok cni_exec DEL /tmp/mr4.prev /run/netns/mr4 net1
	mr_nothing_left mr4 mr4
	for i in 0 1 2 3; do
		ip=$(jq -r ".ips[$i].address" "$res")
		! gid_present "${devs[i]}" "${ip%/*}" || fail "a GID for $ip is still on ${devs[i]}"
	done
	assert_ok cni_exec DEL /tmp/mr4.prev /run/netns/mr4 net1
}

# DEL without prevResult finds the children in the pod, and releases every allocation.
test_multirail_del_without_prev_result() {
	require_plugin
	mr_conf /tmp/mrd.conf mrd '["rdma1", "rdma0"]'
	new_pod mrd
	assert_ok cni_exec ADD /tmp/mrd.conf /run/netns/mrd net2
	assert_eq "$(jq -r '[.interfaces[].name] | join(" ")' <<<"$OUT")" "net2r0 net2r1" "children"
	assert_eq "$(in_pod mrd cat /sys/class/net/net2r0/iflink)" "$(cat /sys/class/net/rdma0/ifindex)" \
		"rails in name order: net2r0 on rdma0"
	assert_eq "$(host_local_ips mrd | wc -l)" 2 "one allocation per child"
	# Another attachment's link with a child-like name is not DEL's to remove.
	in_pod mrd ip link add net3r0 type dummy
	assert_ok cni_exec DEL /tmp/mrd.conf /run/netns/mrd net2
	assert_eq "$(pod_links mrd)" "lo net3r0 " "links left in mrd"
	assert_eq "$(host_local_ips mrd)" "" "host-local allocations after DEL"
	# The pod is gone: IPAM DEL still runs for every child.
	assert_ok cni_exec ADD /tmp/mrd.conf /run/netns/mrd net2
	ip netns del mrd
	CNI_COMMAND=DEL CNI_CONTAINERID=direct-mrd CNI_IFNAME=net2 CNI_PATH=$CNI_PATH \
		"$CNI_BIN_DIR/roce-ipvlan" </tmp/mrd.conf || fail "DEL without a netns failed"
	assert_eq "$(host_local_ips mrd)" "" "host-local allocations after DEL without the pod"
}

# A rail without RDMA among the matches: refused before anything is made (101).
test_multirail_rail_without_rdma_fails_the_whole_add() {
	require_plugin
	local bare=${VM_BARE_NICS%% *}
	mr_conf /tmp/mrbare.conf mrbare "[\"rdma0\", \"rdma1\", \"$bare\"]"
	new_pod mrbare
	assert_fails cni_exec ADD /tmp/mrbare.conf /run/netns/mrbare net1
	assert_eq "$(cni_code "$OUT")" 101 "error code (stdout: $OUT)"
	assert_match "$OUT" "rail $bare has no RDMA port" "the message names the rail"
	mr_nothing_left mrbare mrbare
	# No match at all is a clear error too.
	mr_conf /tmp/mrnone.conf mrnone '["nosuchrail*"]'
	assert_fails cni_exec ADD /tmp/mrnone.conf /run/netns/mrbare net1
	assert_eq "$(cni_code "$OUT")" 100 "no rail matches (stdout: $OUT)"
	assert_match "$OUT" 'matches no netdev' "no-match message"
}

# One rail fails after the others have built their children (its IPAM range has one address
# for two children): every rail is undone, the pod-wide rp_filter restored.
test_multirail_one_failing_rail_undoes_every_rail() {
	require_plugin
	mr_conf /tmp/mrone.conf mrone '["rdma0", "rdma1"]' \
		'{"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.91.0/24", "rangeStart": "10.9.91.10", "rangeEnd": "10.9.91.10"}]]}}'
	new_pod mrone
	in_pod mrone sysctl -qw net.ipv4.conf.all.rp_filter=1
	assert_fails cni_exec ADD /tmp/mrone.conf /run/netns/mrone net1
	assert_eq "$(cni_code "$OUT")" 103 "error code (stdout: $OUT)"
	assert_match "$(jq -r .msg <<<"$OUT")" '^rail rdma[01] \(child net1r[01]\): ' "the message names the rail"
	mr_nothing_left mrone mrone
	assert_eq "$(in_pod mrone cat /proc/sys/net/ipv4/conf/all/rp_filter)" 1 "pod all.rp_filter restored"
}

# Routed IPv6 rails (15-ipv6.sh's routers): four SLAAC rails with dad: wait in one ADD, set up
# at once; its time and one rail's ADD's are noted (make bench compares them on a quiet machine).
test_multirail_ipv6_routed_rails() {
	require_plugin
	# shellcheck source=15-ipv6.sh
	source "$(dirname "${BASH_SOURCE[0]}")/15-ipv6.sh"
	local n t0 t1 one four res=/tmp/mr6.result addr events last_created first_gid
	for n in 0 1 2 3; do start_router "$n" "2001:db8:$((n + 1))::/64"; done
	new_v6off_pod mr6one
	slaac_conf /tmp/mr6one.conf mr6one rdma0
	t0=$(now_ms)
	assert_ok cni_exec ADD /tmp/mr6one.conf /run/netns/mr6one net1
	t1=$(now_ms)
	one=$((t1 - t0))
	assert_ok cni_exec DEL /tmp/mr6one.conf /run/netns/mr6one net1
	# radvd paces its multicast advertisements to one per 3 s per interface (RFC 4861): without
	# the pause, rail 0's child would wait for router 0's next one.
	sleep 3.5
	new_v6off_pod mr6
	slaac_conf /tmp/mr6.conf mr6 rdma0 '{"rails": ["rdma0", "rdma1", "rdma2", "rdma3"], "logLevel": "debug"}'
	jq 'del(.master)' /tmp/mr6.conf >/tmp/mr6.conf.x && mv /tmp/mr6.conf.x /tmp/mr6.conf
	t0=$(now_ms)
	assert_ok cni_exec ADD /tmp/mr6.conf /run/netns/mr6 net1
	t1=$(now_ms)
	four=$((t1 - t0))
	echo "$OUT" >"$res"
	note "one rail's ADD: $one ms; four rails' ADD: $four ms"
	# Where the time went, per rail (the debug log's rail spans): "TIME RAIL EVENT".
	events=$(grep -E 'rail\{' <<<"$ERR" | sed -E 's/^[0-9-]+T([0-9:.]+)Z.*rail\{rail=([^ ]+) .*roce_ipvlan[^ ]*: (.*)/\1 \2 \3/')
	while read -r line; do note "$line"; done <<<"$events"
	# The rails were set up at once: every child existed before any rail's GID was visible
	# (which comes after its SLAAC and DAD waits). Checked on the log's order, not on elapsed
	# time, which a loaded machine stretches at random.
	last_created=$(grep ' child created' <<<"$events" | cut -d' ' -f1 | sort | tail -n1)
	first_gid=$(grep ' GID visible' <<<"$events" | cut -d' ' -f1 | sort | head -n1)
	assert_eq "$(grep -c ' child created' <<<"$events")" 4 "children created (debug log)"
	[[ $last_created < $first_gid ]] ||
		fail "the rails were not set up at once: the last child was created at $last_created, after the first GID at $first_gid"
	assert_eq "$(jq '.interfaces | length' "$res")" 4 "interfaces"
	for n in 0 1 2 3; do
		addr=$(jq -r ".ips[] | select(.interface == $n) | .address" "$res")
		in_prefix "${addr%/*}" "2001:db8:$((n + 1))::/64" || fail "net1r$n's $addr is not rail $n's prefix"
		assert_eq "$(jq -r ".roce[$n].rdmaDevice" "$res")" "$(rail_rdma_dev "rdma$n")" "roce[$n] device"
		assert_eq "$(gid_long "$(jq -r ".roce[$n].gid" "$res")")" "$(gid_long "${addr%/*}")" "roce[$n].gid"
		assert_eq "$(in_pod mr6 cat "/proc/sys/net/ipv6/conf/net1r$n/disable_ipv6")" 0 "net1r$n IPv6 on"
	done
	jq --slurpfile r "$res" '. + {prevResult: $r[0]}' /tmp/mr6.conf >/tmp/mr6.prev
	assert_ok cni_exec CHECK /tmp/mr6.prev /run/netns/mr6 net1
	assert_ok cni_exec DEL /tmp/mr6.prev /run/netns/mr6 net1
	assert_eq "$(pod_links mr6)" "lo " "links left"
	assert_eq "$(count_lines 'lookup 1[0-9]{4}' in_pod mr6 ip -6 rule show)" 0 "IPv6 rules left"
	for n in 0 1 2 3; do stop_router "$n"; done
}

# STATUS checks every matching rail; GC tells the IPAM plugin that a valid attachment's children
# are valid too (their allocations are under the children's names).
test_multirail_status_and_gc() {
	require_plugin
	local bare=${VM_BARE_NICS%% *} got=/run/fake-ipam/ipam-v11.GC.json
	fake_ipam ipam-v11 v11
	mr_conf /tmp/mrsg.conf mrsg '["rdma0", "rdma1"]' '{"ipam": {"type": "ipam-v11", "subnet": "10.9.92.0/24"}}'
	run_cmd env -i CNI_COMMAND=STATUS CNI_PATH="$CNI_PATH" PATH="$PATH" "$CNI_BIN_DIR/roce-ipvlan" </tmp/mrsg.conf
	assert_eq "$RC" 0 "STATUS of two rails with RDMA (stdout: $OUT)"
	mr_conf /tmp/mrsg-bare.conf mrsg '["rdma0", "'"$bare"'"]' '{"ipam": {"type": "ipam-v11", "subnet": "10.9.92.0/24"}}'
	run_cmd env -i CNI_COMMAND=STATUS CNI_PATH="$CNI_PATH" PATH="$PATH" "$CNI_BIN_DIR/roce-ipvlan" </tmp/mrsg-bare.conf
	assert_eq "$(cni_code "$OUT")" 50 "STATUS with a rail without RDMA (stdout: $OUT)"
	assert_match "$OUT" "$bare" "STATUS names the rail"
	jq '. + {"cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "net1"}]}' /tmp/mrsg.conf >/tmp/mrsg.gc
	run_cmd env -i CNI_COMMAND=GC CNI_PATH="$CNI_PATH" PATH="$PATH" "$CNI_BIN_DIR/roce-ipvlan" </tmp/mrsg.gc
	assert_eq "$RC" 0 "GC (stdout: $OUT)"
	assert_eq "$(jq -r '[."cni.dev/valid-attachments"[] | select(.containerID == "c1") | .ifname] | .[0:4] | join(" ")' "$got")" \
		"net1 net1r0 net1r1 net1r2" "valid attachments handed to IPAM: the attachment and its children"
}
