# shellcheck shell=bash
# Routed IPv6 rails (B300 layout): each rail has its own router announcing its own /64 by RA;
# the child gets its routable address by SLAAC. The router of rail N runs radvd in netns rtrN on
# peerN, the second NIC on rail N's QEMU hub (the rail's L2 segment).

# shellcheck source=tests/rail-router.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../rail-router.sh"

# start_router N PREFIX...: (re)start rail N's router announcing PREFIXes; RADVD_OPTS adds
# interface options (e.g. "AdvRetransTimer 1000;")
start_router() { rail_router_start "$@" || fail "rail $1's router did not start"; }
stop_router() { rail_router_stop "$1"; } # stop_router N: radvd stopped, peerN back

# new_v6off_pod NAME: a pod whose pod network is IPv4-only: IPv6 disabled everywhere
new_v6off_pod() {
	new_pod "$1"
	in_pod "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

# slaac_conf FILE NAME MASTER [EXTRA_JSON]: SLAAC, no IPAM
slaac_conf() {
	jq -n --arg name "$2" --arg master "$3" --argjson extra "${4:-{\}}" --argjson limits "$VM_TIMEOUTS" \
		'{cniVersion: "1.0.0", name: $name, type: "roce-ipvlan", master: $master,
		  ipv6: {slaac: true}} + $limits + $extra' >"$1"
}

in_prefix() { # in_prefix ADDR PREFIX
	python3 -c 'import ipaddress, sys; sys.exit(ipaddress.ip_address(sys.argv[1]) not in ipaddress.ip_network(sys.argv[2]))' "$1" "$2"
}

now_ms() { date +%s%3N; }

# verify_slaac POD IFNAME RAIL PREFIX RAW_RESULT: the attachment has the routable SLAAC GID
# Prints "DEV PORT INDEX TABLE ADDR".
verify_slaac() {
	local pod=$1 ifn=$2 rail=$3 prefix=$4 raw=$5 addr dev port idx table base alias
	addr=$(jq -r '.ips[0].address' "$raw")
	addr=${addr%/*}
	in_prefix "$addr" "$prefix" || fail "ips[0] $addr is not in $prefix: $(cat "$raw")"
	assert_match "$(jq -r '.ips[0].gateway' "$raw")" '^fe80:' "ips[0].gateway is the router's link-local"
	assert_match "$(in_pod "$pod" ip -d link show dev "$ifn")" 'ipvlan +mode l2' "$ifn is IPvlan L2"
	dev=$(jq -r .roce.rdmaDevice "$raw") port=$(jq -r .roce.port "$raw") idx=$(jq -r .roce.gidIndex "$raw")
	assert_eq "$dev" "$(rail_rdma_dev "$rail")" "RDMA device of $rail"
	assert_eq "$(gid_long "$(jq -r .roce.gid "$raw")")" "$(gid_long "$addr")" "roce.gid is the SLAAC address"
	base=/sys/class/infiniband/$dev/ports/$port
	assert_eq "$(in_pod "$pod" cat "$base/gids/$idx")" "$(gid_long "$addr")" "GID $dev/$port/$idx seen from the pod"
	assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/types/$idx")" "RoCE v2" "GID type"
	assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/ndevs/$idx")" "$ifn" "GID ndev"
	alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
	assert_eq "$alias" "rdma_dev=$dev port=$port gid_index=$idx gid=$(jq -r .roce.gid "$raw")" "ifalias"
	# IPv6 is on for the child only.
	assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv6/conf/all/disable_ipv6)" 1 "pod all.disable_ipv6"
	assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv6/conf/lo/disable_ipv6)" 1 "pod lo.disable_ipv6"
	assert_eq "$(in_pod "$pod" cat "/proc/sys/net/ipv6/conf/$ifn/disable_ipv6")" 0 "$ifn disable_ipv6"
	table=$((10000 + $(in_pod "$pod" cat "/sys/class/net/$ifn/ifindex")))
	grep -qE "^1000:[[:space:]]+from $addr lookup ${table}[[:space:]]*$" <<<"$(in_pod "$pod" ip -6 rule show)" ||
		fail "no rule '1000: from $addr lookup $table': $(in_pod "$pod" ip -6 rule show | tr '\n' ';')"
	assert_match "$(in_pod "$pod" ip -6 route show table "$table")" "default via fe80:[0-9a-f:]+ dev $ifn" \
		"rail default route in table $table"
	echo "$dev $port $idx $table $addr"
}

# verify_slaac_gone POD IFNAME TABLE ADDR DEV: DEL left nothing
verify_slaac_gone() {
	local pod=$1 ifn=$2 table=$3 addr=$4 dev=$5
	! in_pod "$pod" ip link show dev "$ifn" >/dev/null 2>&1 || fail "$ifn still exists in $pod"
	assert_no_match "$(in_pod "$pod" ip -6 rule show)" "lookup $table( |$)" "IPv6 rule for table $table"
	! grep -qlx "$(gid_long "$addr")" /sys/class/infiniband/"$dev"/ports/*/gids/* 2>/dev/null ||
		fail "a GID for $addr is still on $dev"
}

test_ipv6_slaac_four_rails_no_placeholder() {
	require_plugin
	local n rail info dev port idx table addr t0 t1 res
	local -a tables addrs devs
	for n in 0 1 2 3; do start_router "$n" "2001:db8:$((n + 1))::/64"; done
	new_v6off_pod b300
	for n in 0 1 2 3; do
		rail=rdma$n
		slaac_conf "/tmp/v6-$n.conf" "v6rail$n" "$rail"
		t0=$(now_ms)
		assert_ok cni_exec ADD "/tmp/v6-$n.conf" /run/netns/b300 "net$n" b300
		t1=$(now_ms)
		res=/tmp/v6-$n.result
		echo "$OUT" >"$res"
		info=$(verify_slaac b300 "net$n" "$rail" "2001:db8:$((n + 1))::/64" "$res")
		read -r dev port idx table addr <<<"$info"
		tables[n]=$table addrs[n]=$addr devs[n]=$dev
		note "net$n on $rail: $addr, $dev gid_index $idx; ADD took $((t1 - t0)) ms (dad wait)"
		[[ $(jq '.ips | length' "$res") == 1 ]] || fail "ips should hold only the SLAAC address: $(cat "$res")"
	done
	for n in 0 1 2 3; do
		jq --slurpfile r "/tmp/v6-$n.result" '. + {prevResult: $r[0]}' "/tmp/v6-$n.conf" >"/tmp/v6-$n.prev"
		assert_ok cni_exec CHECK "/tmp/v6-$n.prev" /run/netns/b300 "net$n" b300
	done
	# CHECK notices a missing source rule. (Removing the SLAAC address would not stay removed:
	# the router's next periodic RA brings it back.)
	in_pod b300 ip -6 rule del from "${addrs[0]}" lookup "${tables[0]}"
	assert_fails cni_exec CHECK /tmp/v6-0.prev /run/netns/b300 net0 b300
	assert_eq "$(jq -r .code <<<"$OUT")" 107 "CHECK after the source rule was removed"
	assert_match "$OUT" "from ${addrs[0]} lookup ${tables[0]}" "CHECK names the missing rule"
	for n in 0 1 2 3; do
		assert_ok cni_exec DEL "/tmp/v6-$n.prev" /run/netns/b300 "net$n" b300
		verify_slaac_gone b300 "net$n" "${tables[n]}" "${addrs[n]}" "${devs[n]}"
		assert_ok cni_exec DEL "/tmp/v6-$n.prev" /run/netns/b300 "net$n" b300
	done
}

# The placeholder (as in today's chains) sits at a lower GID index than the SLAAC address:
# the reported index must still be the SLAAC one.
test_ipv6_placeholder_reports_the_slaac_gid() {
	require_plugin
	local info dev port idx table addr pidx ph
	start_router 0 2001:db8:1::/64
	new_v6off_pod ph
	slaac_conf /tmp/ph.conf v6ph rdma0 '{"ipam": {"type": "host-local", "subnet": "fd01:0:0:100::/112"}}'
	assert_ok cni_exec ADD /tmp/ph.conf /run/netns/ph net1 ph
	echo "$OUT" >/tmp/ph.result
	info=$(verify_slaac ph net1 rdma0 2001:db8:1::/64 /tmp/ph.result)
	read -r dev port idx table addr <<<"$info"
	ph=$(jq -r '.ips[1].address' /tmp/ph.result)
	in_prefix "${ph%/*}" fd01:0:0:100::/112 || fail "ips[1] should be the placeholder: $(cat /tmp/ph.result)"
	assert_match "$(in_pod ph ip -6 -o addr show dev net1)" "inet6 ${ph%/*}/112" "placeholder stays on net1"
	pidx=$(in_pod ph grep -lx "$(gid_long "${ph%/*}")" /sys/class/infiniband/"$dev"/ports/"$port"/gids/* | head -n1)
	pidx=${pidx##*/}
	[[ -n $pidx ]] || fail "no GID for the placeholder ${ph%/*}"
	note "placeholder ${ph%/*} at GID index $pidx, SLAAC $addr at $idx (reported)"
	[[ $idx != "$pidx" ]] || fail "reported index is the placeholder's"
	jq --slurpfile r /tmp/ph.result '. + {prevResult: $r[0]}' /tmp/ph.conf >/tmp/ph.prev
	assert_ok cni_exec CHECK /tmp/ph.prev /run/netns/ph net1 ph
	assert_ok cni_exec DEL /tmp/ph.prev /run/netns/ph net1 ph
	verify_slaac_gone ph net1 "$table" "$addr" "$dev"
	! compgen -G '/var/lib/cni/networks/v6ph/*:*' >/dev/null || fail "placeholder allocation left"
}

test_ipv6_prefix_filter_picks_the_announced_prefix() {
	require_plugin
	start_router 1 2001:db8:aaaa:1::/64 2001:db8:bbbb:1::/64
	new_v6off_pod pf
	slaac_conf /tmp/pf.conf v6pf rdma1 '{"ipv6": {"slaac": true, "prefix": "2001:db8:bbbb:1::/64"}}'
	assert_ok cni_exec ADD /tmp/pf.conf /run/netns/pf net1 pf
	echo "$OUT" >/tmp/pf.result
	verify_slaac pf net1 rdma1 2001:db8:bbbb:1::/64 /tmp/pf.result >/dev/null
	assert_ok cni_exec DEL /tmp/pf.conf /run/netns/pf net1 pf
	# A filter that matches nothing: a clean timeout that names what was seen. radvd answers a
	# multicast solicitation at most every 3 s (MIN_DELAY_BETWEEN_RAS) and just answered the first
	# ADD's: the limit leaves room for its next advertisement.
	slaac_conf /tmp/pf2.conf v6pf2 rdma1 '{"ipv6": {"slaac": true, "prefix": "2001:db8:cccc::/48", "raTimeoutMs": 6000}}'
	assert_fails cni_exec ADD /tmp/pf2.conf /run/netns/pf net1 pf
	assert_eq "$(jq -r .code <<<"$OUT")" 109 "error code when no prefix matches"
	assert_match "$OUT" 'outside \\"prefix\\"' "message says the RA's prefix was filtered out"
	! in_pod pf ip link show dev net1 >/dev/null 2>&1 || fail "net1 left behind"
}

test_ipv6_no_router_advertisement_fails_109_and_undoes() {
	require_plugin
	stop_router 2
	new_v6off_pod nora
	slaac_conf /tmp/nora.conf v6nora rdma2 \
		'{"ipam": {"type": "host-local", "subnet": "fd01:0:0:102::/112"}, "ipv6": {"slaac": true, "raTimeoutMs": 2000}}'
	assert_fails cni_exec ADD /tmp/nora.conf /run/netns/nora net1 nora
	assert_eq "$(jq -r .code <<<"$OUT")" 109 "error code without router advertisements (stdout: $OUT)"
	assert_match "$OUT" "rail rdma2" "message names the rail"
	assert_match "$OUT" "no router advertisement arrived" "message says what was seen"
	assert_eq "$(in_pod nora ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " "links left in the pod"
	! compgen -G '/var/lib/cni/networks/v6nora/*:*' >/dev/null || fail "placeholder allocation left"
	assert_eq "$(count_lines 'lookup 1[0-9]{4}' in_pod nora ip -6 rule show)" 0 "rules left"
}

# Each DAD mode's effect, and the time from ADD start to return (figures only; the benchmark
# measures them properly). optimistic runs with a 4 s DAD probe (ipv6.retransTimeMs): ADD must
# return while the SLAAC address is still optimistic (in use, DAD still running); with the
# sysctl not applied it would be tentative. dad=off's effect (a duplicate goes unnoticed) is in
# test_ipv6_duplicate_address_fails_109.
test_ipv6_dad_modes() {
	require_plugin
	local mode t0 t1 pod flags extra
	start_router 3 2001:db8:4::/64
	for mode in wait optimistic off; do
		pod=dad$mode
		new_v6off_pod "$pod"
		extra="{\"slaac\": true, \"dad\": \"$mode\"}"
		[[ $mode != optimistic ]] || extra="{\"slaac\": true, \"dad\": \"$mode\", \"retransTimeMs\": 4000}"
		slaac_conf "/tmp/$pod.conf" "v6$pod" rdma3 "{\"ipv6\": $extra}"
		t0=$(now_ms)
		assert_ok cni_exec ADD "/tmp/$pod.conf" "/run/netns/$pod" net1 "$pod"
		t1=$(now_ms)
		flags=$(in_pod "$pod" ip -6 -o addr show dev net1 scope global)
		[[ $mode != optimistic ]] || assert_match "$flags" 'optimistic' "dad=optimistic: the SLAAC address's flags when ADD returned"
		echo "$OUT" >"/tmp/$pod.result"
		verify_slaac "$pod" net1 rdma3 2001:db8:4::/64 "/tmp/$pod.result" >/dev/null
		note "dad=$mode: ADD returned after $((t1 - t0)) ms; address flags now: $(in_pod "$pod" ip -6 -o addr show dev net1 scope global | awk '{print $4, $5, $6, $7}' | tr '\n' ';')"
		case $mode in
		wait)
			assert_no_match "$(in_pod "$pod" ip -6 -o addr show dev net1)" tentative "no tentative address (global or link-local) after dad=wait"
			# radvd leaves the RA's Retrans Timer unspecified: the plugin's DAD pace stays.
			assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv6/neigh/net1/retrans_time_ms)" 100 "retrans_time_ms with the default ipv6.retransTimeMs"
			;;
		off) assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv6/conf/net1/accept_dad)" 0 "accept_dad with dad=off" ;;
		optimistic) assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv6/conf/net1/optimistic_dad)" 1 "optimistic_dad" ;;
		esac
		assert_ok cni_exec DEL "/tmp/$pod.conf" "/run/netns/$pod" net1 "$pod"
	done
}

# next_child_addrs RAIL PREFIX: the link-local and the SLAAC address (in PREFIX, a /64) that the
# next IPvlan child of RAIL will get, as "LL GLOBAL". ipvlan numbers a rail's children (dev_id)
# from a counter that only grows (until it wraps at 0xFFFE); with addr_gen_mode 0 (eui64, the
# default) the kernel puts dev_id where EUI-64 has ff:fe and leaves the universal/local bit
# alone (addrconf_ifid_eui48). A probe child (v6probe, down in the host namespace) reads the
# counter; it must stay until the next child exists: a rail's last child takes the counter with
# it, and the next one starts again at 1. Delete it with `ip link del v6probe` after the ADD.
next_child_addrs() {
	local rail=$1 prefix=$2 id
	ip link del v6probe 2>/dev/null || true
	ip link add link "$rail" name v6probe type ipvlan mode l2
	id=$(cat /sys/class/net/v6probe/dev_id)
	python3 - "$(cat "/sys/class/net/$rail/address")" "$id" "$prefix" <<'EOF'
import ipaddress, sys
m = [int(x, 16) for x in sys.argv[1].split(":")]
d = int(sys.argv[2], 16) + 1
iid = int.from_bytes(bytes(m[:3] + [d >> 8, d & 0xFF] + m[3:]), "big")
net = ipaddress.ip_network(sys.argv[3])
print(ipaddress.ip_address(int(ipaddress.ip_address("fe80::")) + iid), net[iid])
EOF
}

# Duplicate address detection still runs with the short DAD of dad=wait: a node on the rail (the
# router side here) that holds the child's link-local or SLAAC address makes ADD fail with 109,
# saying which address and what to do. A control ADD first shows the predicted addresses are the
# child's, so each failure comes from the duplicate alone.
test_ipv6_duplicate_address_fails_109() {
	require_plugin
	local ll glob t0 t1
	start_router 2 2001:db8:3::/64
	new_v6off_pod dup
	slaac_conf /tmp/dup.conf v6dup rdma2
	read -r ll glob <<<"$(next_child_addrs rdma2 2001:db8:3::/64)"
	t0=$(now_ms)
	assert_ok cni_exec ADD /tmp/dup.conf /run/netns/dup net1 dup
	t1=$(now_ms)
	ip link del v6probe
	assert_eq "$(jq -r '.ips[0].address' <<<"$OUT")" "$glob/64" "SLAAC address as predicted"
	assert_match "$(in_pod dup ip -6 -o addr show dev net1 scope link)" "inet6 $ll/64 scope link" "link-local as predicted"
	note "control: $ll and $glob on net1, ADD took $((t1 - t0)) ms"
	assert_ok cni_exec DEL /tmp/dup.conf /run/netns/dup net1 dup

	dup_case link-local "link-local address %s"
	dup_case SLAAC "SLAAC address %s/64"
	assert_eq "$(count_lines 'lookup 1[0-9]{4}' in_pod dup ip -6 rule show)" 0 "rules left"

	# dad=off is what its name says: the same duplicate SLAAC address goes unnoticed (no DAD
	# runs on the child), so ADD passes and the address is in use, neither tentative nor
	# dadfailed. Were accept_dad left on, this ADD would fail or leave a dadfailed address.
	slaac_conf /tmp/dupoff.conf v6dupoff rdma2 '{"ipv6": {"slaac": true, "dad": "off"}}'
	read -r ll glob <<<"$(next_child_addrs rdma2 2001:db8:3::/64)"
	ip -n rtr2 addr add "$glob/64" dev peer2 nodad
	assert_ok cni_exec ADD /tmp/dupoff.conf /run/netns/dup net1 dup
	ip link del v6probe
	assert_eq "$(jq -r '.ips[0].address' <<<"$OUT")" "$glob/64" "dad=off: the SLAAC address the router side also holds"
	sleep 1 # a DAD probe, had one been sent, would have been answered by now
	local flags
	flags=$(in_pod dup ip -6 -o addr show dev net1)
	note "dad=off with $glob held by the router side: $(awk '{print $4, $5, $6, $7, $8}' <<<"$flags" | tr '\n' ';')"
	assert_match "$flags" "inet6 $glob/64" "dad=off: the duplicate address is on net1"
	assert_no_match "$flags" 'tentative|dadfailed' "dad=off: no DAD ran on net1"
	assert_ok cni_exec DEL /tmp/dupoff.conf /run/netns/dup net1 dup
	ip -n rtr2 addr del "$glob/64" dev peer2
}

# dup_case link-local|SLAAC MESSAGE_FORMAT: the next child's address of that kind on the router
# side of rail 2; ADD into pod dup fails with 109, the message (MESSAGE_FORMAT with the address)
# says DAD failed, and nothing is left in the pod
dup_case() {
	local kind=$1 ll glob addr
	read -r ll glob <<<"$(next_child_addrs rdma2 2001:db8:3::/64)"
	addr=$glob
	[[ $kind == link-local ]] && addr=$ll
	ip -n rtr2 addr add "$addr/64" dev peer2 nodad
	assert_fails cni_exec ADD /tmp/dup.conf /run/netns/dup net1 dup
	ip link del v6probe
	assert_eq "$(jq -r .code <<<"$OUT")" 109 "error code for a duplicate $kind address (stdout: $OUT)"
	# shellcheck disable=SC2059 # the format is the caller's, with one %s
	assert_match "$OUT" "$(printf "$2" "$addr")" "message names the $kind address"
	assert_match "$OUT" "duplicate address detection failed" "message says DAD failed"
	assert_match "$OUT" "expected" "message says what was expected"
	assert_eq "$(in_pod dup ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " "links left after the $kind duplicate"
	ip -n rtr2 addr del "$addr/64" dev peer2
}

# A router that announces its own Retrans Timer: the kernel adopts it (RFC 4861 6.3.4) for the
# child when the RA arrives, after link-local DAD ran at the plugin's pace, so the SLAAC
# address's DAD takes the router's time. ADD still waits for it, and CHECK accepts the
# router's value.
test_ipv6_router_retrans_timer_wins() {
	require_plugin
	local t0 t1
	RADVD_OPTS="AdvRetransTimer 700;" start_router 3 2001:db8:4::/64
	new_v6off_pod rt
	slaac_conf /tmp/rt.conf v6rt rdma3
	t0=$(now_ms)
	assert_ok cni_exec ADD /tmp/rt.conf /run/netns/rt net1 rt
	t1=$(now_ms)
	echo "$OUT" >/tmp/rt.result
	verify_slaac rt net1 rdma3 2001:db8:4::/64 /tmp/rt.result >/dev/null
	assert_no_match "$(in_pod rt ip -6 -o addr show dev net1)" tentative "no tentative address after dad=wait"
	assert_eq "$(in_pod rt cat /proc/sys/net/ipv6/neigh/net1/retrans_time_ms)" 700 "retrans_time_ms after the router's RA"
	note "router Retrans Timer 700 ms: ADD took $((t1 - t0)) ms"
	jq --slurpfile r /tmp/rt.result '. + {prevResult: $r[0]}' /tmp/rt.conf >/tmp/rt.prev
	assert_ok cni_exec CHECK /tmp/rt.prev /run/netns/rt net1 rt
	assert_ok cni_exec DEL /tmp/rt.prev /run/netns/rt net1 rt
	start_router 3 2001:db8:4::/64
}
