# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# The effect of the plugin's reverse-path, ARP-announce and accept-local sysctls, on the wire of
# the flat layout, each test beside the control that puts the cause back (its value in
# `sysctl`). The first two matter where a pod's traffic for one rail's address meets another
# rail's route: without source routing (sourceRouting false: every rail's connected route is in
# the pod's main table and the first one wins), or for a source the routing did not pick. With
# the plugin's source rules, a strict reverse-path check looks up the rail's own table and
# passes (20-arp.sh). accept_local matters for a packet that comes in by one rail with another
# rail's address of the same pod as its source: a switch that hairpins a packet one rail sent
# back to another rail of the node delivers such packets (IPvlan itself delivers between one
# pod's children inside the namespace, never through a rail).

PINGS=5

# rp_filter_pods EXTRA_JSON: flat_pods, with pod A's conf/all and conf/default rp_filter set
# to 1 (strict) before its ADD, as a distribution's sysctl.d or a runtime may leave them
rp_filter_pods() {
	new_pods
	in_pod podA sysctl -qw net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.default.rp_filter=1
	flat_attach "$1"
}

# pod_a_counter FILE GROUP NAME: pod A's counter NAME of GROUP in /proc/net/FILE (snmp, netstat)
pod_a_counter() {
	# shellcheck disable=SC2016 # an awk program
	in_pod podA awk -v g="$2:" -v n="$3" '$1 == g {
		if (!h) { for (i = 2; i <= NF; i++) if ($i == n) c = i; h = 1 } else { print (c ? $c : "none"); exit } }' "/proc/net/$1"
}

# echoed_rails: from host b's rail n, PINGS echo requests to pod A's rail-n address, rail by
# rail; sets ECHOED to the rails whose requests reached pod A's ICMP (its InEchos counter grew
# by PINGS; a reverse-path drop, of the requests or of the ARP before them, leaves it as is)
echoed_rails() {
	local n e0 e1 r0 r1
	ECHOED=""
	for n in 0 1 2 3; do
		e0=$(pod_a_counter snmp Icmp InEchos)
		r0=$(pod_a_counter netstat TcpExt IPReversePathFilter)
		on b ping -q -c "$PINGS" -i 0.2 -W 1 -I "$(fabric_addr b "$n")" "${ADDR_A[n]}" >/dev/null || true
		e1=$(pod_a_counter snmp Icmp InEchos)
		r1=$(pod_a_counter netstat TcpExt IPReversePathFilter)
		note "rail $n: pod A's ${ADDR_A[n]} got $((e1 - e0)) of $PINGS echo requests; its IPReversePathFilter counter $r0 -> $r1"
		((e1 - e0 >= PINGS)) && ECHOED+=$n
	done
	return 0
}

# The pod's reverse-path settings as the plugin leaves them: pod A's conf/all and the children's
# rp_filter both 0 (it writes both; the effective value is the larger), so a request on a rail
# whose route is not the first in the main table is delivered. arp_filter is 0 here so that the
# ARP of the other rails is answered without source routing too (arp_filter looks the same
# route up); the control differs from this test in rp_filter alone.
test_flat_rp_filter_off_delivers_every_rail_without_source_routing() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ECHOED
	rp_filter_pods '{"sourceRouting": false, "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "0"}}'
	flat_addrs
	assert_eq "$(in_pod podA sysctl -n net.ipv4.conf.all.rp_filter)" 0 "pod A's conf/all rp_filter after ADD"
	echoed_rails
	assert_eq "$ECHOED" 0123 "rails whose echo requests reached pod A"
}

# The control: the same pods with the strict rp_filter kept (the plugin's two keys given 1): only
# the rail whose connected route comes first in pod A's main table passes the reverse-path
# check; the other three rails' requests (or their ARP) are dropped.
test_flat_rp_filter_strict_drops_the_other_rails_without_source_routing() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ECHOED
	rp_filter_pods '{"sourceRouting": false, "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "0",
		"net.ipv4.conf.all.rp_filter": "1", "net.ipv4.conf.IFNAME.rp_filter": "1"}}'
	flat_addrs
	echoed_rails
	assert_eq "${#ECHOED}" 1 "rails whose echo requests reached pod A (got '$ECHOED')"
}

# first_rail: the rail of the connected route pod A's main table picks for the rails' subnet
first_rail() {
	local dev
	dev=$(in_pod podA ip -o route get "$(fabric_addr b 0)" from "${ADDR_A[0]}" | grep -oE 'dev net1r[0-3]')
	echo "${dev#dev net1r}"
}

# learnt_elsewhere: pod A sends from each rail-n address (n != K) to host b's rail-K address,
# K the rail its route takes (first_rail): one ping each, with the neighbour entries of both
# sides flushed first so that pod A asks ARP on rail K. Sets ELSEWHERE to the rails n whose
# address host b then has on its rail K with rail K's MAC: the ARP request carried addr_n as
# its sender (arp_announce 0) and taught host b a wrong rail for it. Sets ASKED to the rails n
# whose ARP request pod A was seen to send: pod A's own entry for host b's address on rail K got
# host b's MAC. Host b's reply goes to the request's sender address, which IPvlan delivers to
# pod A's rail-K child only when that is the child's own address (arp_announce 2); so with the
# plugin's setting every request shows, and an empty ELSEWHERE with no request sent proves
# nothing.
learnt_elsewhere() {
	local k n target entry own
	k=$(first_rail)
	[[ $k =~ ^[0-3]$ ]] || fail "pod A's route to host b's rail-0 address names no rail child"
	target=$(fabric_addr b "$k")
	ELSEWHERE="" ASKED=""
	for n in 0 1 2 3; do
		((n == k)) && continue
		on b ip neigh flush to "${ADDR_A[n]}"
		in_pod podA ip neigh flush to "$target"
		in_pod podA ping -q -c 1 -W 1 -I "${ADDR_A[n]}" "$target" >/dev/null || true
		entry=$(on b ip neigh show to "${ADDR_A[n]}" dev "rdma$k")
		own=$(in_pod podA ip neigh show to "$target" dev "net1r$k")
		note "pod A's ${ADDR_A[n]} (rail $n) to host b's $target by rail $k: host b's entry on rdma$k: '${entry:-none}'; pod A's for $target: '${own:-none}'"
		[[ $entry == *"lladdr $(fabric_mac a "$k")"* ]] && ELSEWHERE+=$n
		[[ $own == *"lladdr $(fabric_mac b "$k")"* ]] && ASKED+=$n
	done
	return 0
}

# arp_announce 2 (the plugin's): an ARP request a child sends carries the child's own address as
# its sender, whatever the source of the packet that needed it, so a peer never learns another
# rail's address on this rail.
test_flat_arp_announce_keeps_other_rails_addresses_off_the_rail() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ELSEWHERE ASKED
	flat_pods '{"sourceRouting": false}'
	flat_addrs
	learnt_elsewhere
	assert_eq "${#ASKED}" 3 "ARP requests pod A sent and host b answered (rails '$ASKED')"
	[[ -z $ELSEWHERE ]] || fail "host b learnt pod A's rail-$ELSEWHERE address(es) on another rail from its ARP requests"
}

# The control: arp_announce 0 (the kernel's default) puts the packet's source, another rail's
# address, in the request, and host b files it under the wrong rail: the three other rails.
test_flat_arp_announce_0_teaches_the_peer_wrong_rails() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ELSEWHERE ASKED
	flat_pods '{"sourceRouting": false, "sysctl": {"net.ipv4.conf.IFNAME.arp_announce": "0"}}'
	flat_addrs
	learnt_elsewhere
	assert_eq "${#ELSEWHERE}" 3 "rails whose address host b learnt on another rail (got '$ELSEWHERE')"
}

# hairpinned_echoes: PINGS echo requests to pod A's rail-1 address with pod A's rail-0 address
# as their source, coming in by rail 1, as a switch that hairpins rail 0's packet to rail 1 of
# the same node delivers them. Host b sends them from its rdma1: pod A's rail-0 address lent to
# it (/32, undone by the EXIT trap), a host route to pod A's rail-1 address by rdma1 from it,
# and a permanent neighbour entry for that address (host b sends no ARP naming pod A's address
# as its sender). Fails unless the requests left host b by rdma1 and reached host a's rdma1;
# sets ECHOES to how much pod A's InEchos counter grew (its replies go to its own rail-0
# address, so host b gets none) and MARTIANS to how much host a's in_martian_src grew
# (/proc/net/stat/rt_cache: one count for the whole host, every namespace).
hairpinned_echoes() {
	local src=${ADDR_A[0]} dst=${ADDR_A[1]} e0 e1 m0 m1 tx0 tx1 rx0 rx1
	# shellcheck disable=SC2064 # the addresses named now
	trap "on b ip neigh del '$dst' dev rdma1 || true; on b ip route del '$dst/32' dev rdma1 || true
		on b ip addr del '$src/32' dev rdma1 || true; fabric_cleanup" EXIT
	on b ip addr add "$src/32" dev rdma1
	on b ip route replace "$dst/32" dev rdma1 src "$src"
	on b ip neigh replace "$dst" lladdr "$(fabric_mac a 1)" dev rdma1 nud permanent
	read -r -a tx0 <<<"$(rail_packets b tx)"
	read -r -a rx0 <<<"$(rail_packets a rx)"
	e0=$(pod_a_counter snmp Icmp InEchos)
	m0=$(martian_sources)
	on b ping -q -c "$PINGS" -i 0.2 -W 1 -I "$src" "$dst" >/dev/null || true
	e1=$(pod_a_counter snmp Icmp InEchos)
	m1=$(martian_sources)
	read -r -a tx1 <<<"$(rail_packets b tx)"
	read -r -a rx1 <<<"$(rail_packets a rx)"
	ECHOES=$((e1 - e0)) MARTIANS=$((m1 - m0))
	note "from $src to $dst by rail 1: host b rdma1 tx +$((tx1[1] - tx0[1])) packets, host a rdma1 rx +$((rx1[1] - rx0[1])); pod A's InEchos +$ECHOES, host a's in_martian_src +$MARTIANS"
	((tx1[1] - tx0[1] >= PINGS && rx1[1] - rx0[1] >= PINGS)) ||
		fail "the $PINGS echo requests did not cross rail 1 (host b rdma1 tx +$((tx1[1] - tx0[1])), host a rdma1 rx +$((rx1[1] - rx0[1])) packets)"
}

# martian_sources: host a's in_martian_src, summed over its CPUs (hexadecimal columns)
martian_sources() {
	local -a cols row
	local i c=-1 n=0
	{
		read -r -a cols
		for i in "${!cols[@]}"; do [[ ${cols[i]} == in_martian_src ]] && c=$i; done
		((c >= 0)) || fail "/proc/net/stat/rt_cache has no in_martian_src column: ${cols[*]}"
		while read -r -a row; do n=$((n + 16#${row[c]})); done
	} </proc/net/stat/rt_cache
	echo "$n"
}

# hairpin_pod: pod A alone attached (plugin defaults: arpSysctls, source routing) and ADDR_A
hairpin_pod() {
	new_pods
	attach a "$(flat_conf a '{}')" net1 >/tmp/flat-a.result
	flat_addrs
}

# accept_local 1 (the plugin's) on the child a packet comes in by: a packet from another of the
# pod's own addresses, hairpinned back by the fabric, is delivered (without it the kernel
# drops it as a martian source, even with rp_filter 0).
test_flat_accept_local_delivers_a_hairpinned_packet_from_the_pods_own_address() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ECHOES MARTIANS
	hairpin_pod
	note "pod A's net1r1 accept_local after ADD: $(in_pod podA sysctl -n net.ipv4.conf.net1r1.accept_local)"
	hairpinned_echoes
	assert_eq "$ECHOES" "$PINGS" "hairpinned echo requests that reached pod A's ICMP"
}

# The control: the same pod with the child's accept_local given back to 0 (conf/all's is 0 in a
# new namespace; rp_filter as the plugin set it): the requests reach pod A's rail-1 child, and
# the kernel counts them as martian sources instead of delivering them.
test_flat_accept_local_0_drops_the_hairpinned_packet_as_martian() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B ECHOES MARTIANS
	hairpin_pod
	in_pod podA sysctl -qw net.ipv4.conf.net1r1.accept_local=0
	assert_eq "$(in_pod podA sysctl -n net.ipv4.conf.all.accept_local)" 0 "pod A's conf/all accept_local"
	hairpinned_echoes
	assert_eq "$ECHOES" 0 "hairpinned echo requests that reached pod A's ICMP"
	((MARTIANS >= PINGS)) || fail "host a counted $MARTIANS martian sources for the $PINGS requests"
}
