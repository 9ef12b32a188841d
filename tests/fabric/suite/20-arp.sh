# shellcheck shell=bash
# shellcheck disable=SC2034 # the arrays and POD_NET_*: set and read by lib.sh's helpers
# ARP flux on the flat layout (A100: every rail in one subnet), seen from host b: ARP for each of
# pod A's rail addresses must be answered only on that address's rail, and the pod's replies
# must leave by the rail of their source address. With arpSysctls false and sourceRouting false
# (what a bare ipvlan gives) the pod answers on every rail and replies by its first rail.

PINGS=10

# arp_matrix: from host b's rail m, who has pod A's rail-n address, for every n and m at once
# (arp-probe.sh); prints "n m <replies> <MACs>" lines
arp_matrix() {
	on b tests/fabric/suite/arp-probe.sh "${ADDR_A[@]}"
}

# arp_and_reply_checks: sets OFF_RAIL_ARP ("addr-rail@asked-rail ...") and WRONG_WAY (rails
# whose ping replies did not leave by their own rail, or did not arrive)
arp_and_reply_checks() {
	local n m count macs t0 t1 moved rc
	local probes=0
	OFF_RAIL_ARP="" WRONG_WAY=""
	while read -r n m count macs; do
		probes=$((probes + 1))
		{
			if ((m == n)); then
				[[ $count -gt 0 && $macs == "$(fabric_mac a "$n")" ]] ||
					fail "ARP for pod A's rail-$n address ${ADDR_A[n]} on rail $n: $count replies from '$macs', want one from $(fabric_mac a "$n")"
			elif ((count > 0)); then
				OFF_RAIL_ARP+="$n@$m "
				note "ARP for rail $n's ${ADDR_A[n]} asked on rail $m: answered by ${macs% }"
			fi
		}
	done < <(arp_matrix)
	((probes == 16)) || fail "host b ran $probes ARP probes, not 16 (4 addresses x 4 rails)"
	for n in 0 1 2 3; do
		read -r -a t0 <<<"$(rail_packets a tx)"
		rc=0
		on b ping -q -c "$PINGS" -i 0.2 -W 2 -I "$(fabric_addr b "$n")" "${ADDR_A[n]}" >/dev/null || rc=$?
		read -r -a t1 <<<"$(rail_packets a tx)"
		moved=""
		for m in 0 1 2 3; do ((t1[m] - t0[m] >= PINGS)) && moved+=$m; done
		note "ping from host b's rail $n to pod A's ${ADDR_A[n]}: exit $rc; host a's rails that sent the replies: ${moved:-none}"
		[[ $rc == 0 && $moved == "$n" ]] || WRONG_WAY+=$n
	done
}

test_flat_arp_answered_and_replies_sent_on_their_own_rail() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B OFF_RAIL_ARP WRONG_WAY
	flat_pods '{}'
	flat_addrs
	arp_and_reply_checks
	[[ -z $OFF_RAIL_ARP ]] || fail "pod A's addresses answered off their rail (rail@asked-on): $OFF_RAIL_ARP"
	[[ -z $WRONG_WAY ]] || fail "replies that did not leave by their own rail: rails $WRONG_WAY"
}

# The control: without the plugin's ARP sysctls and source routing both faults show, so the test
# above cannot pass on a kernel that never misbehaves.
test_flat_bare_ipvlan_arp_flux_and_wrong_rail_replies() {
	require_plugin
	local -a ADDR_A
	local POD_NET_A POD_NET_B OFF_RAIL_ARP WRONG_WAY
	flat_pods '{"arpSysctls": false, "sourceRouting": false}'
	flat_addrs
	arp_and_reply_checks
	assert_eq "$(wc -w <<<"$OFF_RAIL_ARP")" 12 "off-rail ARP answers (4 addresses x 3 other rails)"
	# Every reply leaves by the one rail whose connected route comes first in the pod's main
	# table (the rails are set up at once, so which one varies): the other three go wrong.
	assert_eq "${#WRONG_WAY}" 3 "rails whose replies did not leave by their own rail ($WRONG_WAY)"
}
