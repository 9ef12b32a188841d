# Pod-to-pod traffic between two emulated nodes over the rails (docs/traffic.md): each packet
# leaves and arrives on its own rail, and RoCE v2 runs between the pods.
#
# Node A is the VM's initial namespace with rdma0..rdma3. Node B is the netns nodeB; its rails
# are named rdma0..rdma3 too (names are per namespace) and roce-ipvlan attaches pod B to them by
# running inside nodeB. IPv4 (flat subnet): node B's rail N is peerN, the second NIC on rail N's
# QEMU hub, so both nodes share rail N's L2 segment. IPv6 (routed): rail N's router rtrN holds
# peerN (node A's segment) and one end of a veth whose other end is node B's rail N (node B's
# segment); it forwards between its own /64 on each side.
#
# These tests need a kernel whose Soft-RoCE carries traffic for an address in another netns
# (7.x): 'make vm-traffic' boots trixie-backports' kernel and runs them. suite/run.sh leaves
# them out unless a pattern selects them.

RAILS=(rdma0 rdma1 rdma2 rdma3)
PINGS=10

traffic_cleanup() {
	local n
	for n in 0 1 2 3; do
		[[ -s /run/radvd-t$n.pid ]] && kill "$(cat "/run/radvd-t$n.pid")" 2>/dev/null
		rm -f "/run/radvd-t$n.pid"
	done
	cleanup_pods
	rm -rf /var/lib/cni/nodeA /var/lib/cni/nodeB # host-local state of the pods just deleted
	# Physical NICs return to the initial namespace when their namespace goes; hand them back
	# under their own names first, or they would come back as rdmaN next to node A's rdmaN.
	if [[ -e /run/netns/nodeB ]]; then
		for n in 0 1 2 3; do
			ip netns exec nodeB rdma link del "rxeB$n" 2>/dev/null || true
			if [[ $(ip netns exec nodeB cat "/sys/class/net/rdma$n/address" 2>/dev/null) == 52:54:00:0b:* ]]; then
				ip -n nodeB link set "rdma$n" down
				ip -n nodeB link set "rdma$n" name "peer$n"
				ip -n nodeB link set "peer$n" netns 1
			fi
		done
		ip netns del nodeB
	fi
	for n in 0 1 2 3; do
		if [[ -e /run/netns/rtr$n ]]; then
			ip -n "rtr$n" link set "peer$n" netns 1 2>/dev/null || true
			ip netns del "rtr$n"
		fi
	done
	for n in 0 1 2 3; do ip link set "peer$n" down 2>/dev/null || true; done
}

# node_b_flat: node B's rails are the peer NICs, on the same segments as node A's rails.
node_b_flat() {
	local n
	new_node_b
	# No IPv6 chatter (RS, MLD) of node B's own on the flat rails, so that the pods' rail
	# counters move only with the test's traffic.
	ip netns exec nodeB sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	for n in 0 1 2 3; do
		ip link set "peer$n" netns nodeB
		ip -n nodeB link set "peer$n" name "rdma$n"
		ip -n nodeB link set "rdma$n" up
		node_b_rxe "$n"
	done
}

new_node_b() {
	ip netns add nodeB
	ip -n nodeB link set lo up
}

# node_b_rxe N: Soft-RoCE on node B's rail N, created inside nodeB. In shared RDMA netns mode
# rxe's device list is global but 'netdev rdmaN' resolves in the caller's namespace, and RDMA
# netlink reports a port's netdev only to a socket in the netdev's namespace: so the plugin
# running in nodeB finds rxeBN as rdmaN's port by itself (no rdma.device needed).
node_b_rxe() {
	local n=$1
	ip netns exec nodeB rdma link add "rxeB$n" type rxe netdev "rdma$n"
	assert_match "$(ip netns exec nodeB rdma link show "rxeB$n/1")" "netdev rdma$n( |$)" \
		"rxeB$n's netdev seen from nodeB"
	assert_no_match "$(rdma link show "rxeB$n/1")" "netdev" "rxeB$n's netdev seen from node A"
}

# attach NODE POD IFNAME CONF: roce-ipvlan ADD the way NODE's runtime runs it: node B's from
# inside nodeB, where the plugin finds the master and its RDMA port. The raw result goes to
# /tmp/POD-IFNAME.json.
attach() {
	local node=$1 pod=$2 ifn=$3 conf=$4 log=${5:-} on=()
	[[ $node == B ]] && on=(ip netns exec nodeB)
	run_cmd "${on[@]}" env CNI_COMMAND=ADD CNI_CONTAINERID="$pod" CNI_NETNS="/run/netns/$pod" \
		CNI_IFNAME="$ifn" CNI_PATH="$CNI_PATH" "$CNI_BIN_DIR/roce-ipvlan" <"$conf"
	((RC == 0)) || fail "ADD of $pod $ifn on node $node exited $RC: $OUT${log:+; $log: $(tail -n 8 "$log" | tr '\n' ' ')}"
	echo "$OUT" >"/tmp/$pod-$ifn.json"
}

# flat_pods EXTRA_JSON: pod A and pod B on rails 0..3 in 10.20.0.0/16 (host-local, one range
# per node, A100 layout); sets ADDR_A[n], ADDR_B[n]
flat_pods() {
	local extra=${1:-{\}} n node pod range
	node_b_flat
	for node in A B; do
		pod=pod$node
		new_pod "$pod"
		in_pod "$pod" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		[[ $node == A ]] && range=1 || range=2
		jq -n --arg dir "/var/lib/cni/node$node" --arg s "10.20.$range.1" --arg e "10.20.$range.254" \
			--argjson extra "$extra" \
			'{cniVersion: "1.0.0", name: "flat", type: "roce-ipvlan",
			  ipam: {type: "host-local", subnet: "10.20.0.0/16", rangeStart: $s, rangeEnd: $e,
			         dataDir: $dir}} + $extra' >"/tmp/flat-$node.json"
		for n in 0 1 2 3; do
			jq --arg m "rdma$n" '. + {master: $m}' "/tmp/flat-$node.json" >"/tmp/flat-$node-$n.json"
			attach "$node" "$pod" "net$n" "/tmp/flat-$node-$n.json"
		done
	done
	for n in 0 1 2 3; do
		ADDR_A[n]=$(jq -r '.ips[0].address' "/tmp/podA-net$n.json")
		ADDR_A[n]=${ADDR_A[n]%/*}
		ADDR_B[n]=$(jq -r '.ips[0].address' "/tmp/podB-net$n.json")
		ADDR_B[n]=${ADDR_B[n]%/*}
	done
	note "pod A: ${ADDR_A[*]}; pod B: ${ADDR_B[*]} (rails 0..3)"
}

counters() { # counters POD DIR: "<net0> <net1> <net2> <net3>" DIR (tx|rx) packet counters
	local n out=()
	for n in 0 1 2 3; do out+=("$(in_pod "$1" cat "/sys/class/net/net$n/statistics/$2_packets")"); done
	echo "${out[*]}"
}

# rail_check N [FAMILY]: ping pod B's rail-N address from pod A's rail-N address; print
# "<rails whose tx moved in A>|<rails whose rx moved in B>|<deltas>|<ping rc>". A rail counts as
# carrying the flow when its counter moved by at least PINGS.
rail_check() {
	local n=$1 fam=${2:-4} a0 b0 a1 b1 m da db carried_a="" carried_b="" deltas="" rc=0
	a0=($(counters podA tx)) b0=($(counters podB rx))
	in_pod podA ping -"$fam" -q -c "$PINGS" -i 0.1 -W 2 -I "${ADDR_A[n]}" "${ADDR_B[n]}" >/tmp/ping.log 2>&1 || rc=$?
	((rc == 0)) || echo "  - ping: $(tr '\n' ' ' </tmp/ping.log)" >&2
	a1=($(counters podA tx)) b1=($(counters podB rx))
	for m in 0 1 2 3; do
		da=$((a1[m] - a0[m])) db=$((b1[m] - b0[m]))
		((da >= PINGS)) && carried_a+="$m"
		((db >= PINGS)) && carried_b+="$m"
		deltas+="net$m tx+$da/rx+$db "
	done
	echo "${carried_a:--}|${carried_b:--}|${deltas% }|$rc"
}

# arp_replies RAIL ADDR: how many nodes answer ARP for ADDR on RAIL (asked from pod A's child on
# RAIL); prints "<count> <MACs>"
arp_replies() {
	local m=$1 addr=$2 out
	out=$(in_pod podA arping -c 1 -w 1 -I "net$m" -s "${ADDR_A[m]}" "$addr" 2>&1 || true)
	echo "$(grep -c 'reply from' <<<"$out" || true) $(grep -oiE '\[[0-9a-f:]+\]' <<<"$out" | tr 'A-F' 'a-f' | sort -u | tr -d '[]' | tr '\n' ' ')"
}

# The IPv4 checks of one configuration; prints one line per rail and per ARP probe, and sets
# BAD_ROUTE (rails whose flow did not stay on its rail) and BAD_ARP (probes answered off-rail).
ipv4_rail_checks() {
	local n m r carried_a carried_b deltas rc count macs
	BAD_ROUTE="" BAD_ARP=""
	for n in 0 1 2 3; do
		r=$(rail_check "$n")
		IFS='|' read -r carried_a carried_b deltas rc <<<"$r"
		note "rail $n: ${ADDR_A[n]} -> ${ADDR_B[n]}: ping rc $rc; $deltas"
		[[ $carried_a == "$n" && $carried_b == "$n" && $rc == 0 ]] || BAD_ROUTE+="$n"
	done
	for n in 0 1 2 3; do
		for m in 0 1 2 3; do
			read -r count macs <<<"$(arp_replies "$m" "${ADDR_B[n]}")"
			if ((m == n)); then
				# Node B's rail N NIC is peerN: MAC 52:54:00:0b:00:0N (run.sh).
				[[ $count -gt 0 && $macs == "52:54:00:0b:00:0$n" ]] || {
					BAD_ARP+="$n@$m "
					note "ARP for rail $n's ${ADDR_B[n]} on rail $n: $count replies from '$macs'"
				}
			else
				[[ $count == 0 ]] || { BAD_ARP+="$n@$m "; note "ARP for rail $n's ${ADDR_B[n]} answered on rail $m by $macs"; }
			fi
		done
	done
	note "flows off their rail: ${BAD_ROUTE:-none}; ARP answered off-rail (rail@asked-on): ${BAD_ARP:-none}"
}

test_traffic_ipv4_flat_rails_stay_on_their_rail() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	flat_pods
	ipv4_rail_checks
	[[ -z $BAD_ROUTE ]] || fail "flows that did not leave/arrive on their own rail: rails $BAD_ROUTE"
	[[ -z $BAD_ARP ]] || fail "ARP answered off its rail (rail@asked-on): $BAD_ARP"
}

# Without the ARP sysctls pod B answers ARP for every rail's address on every rail (ARP flux):
# the same checks must fail.
test_traffic_ipv4_without_arp_sysctls_arp_flux() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	flat_pods '{"arpSysctls": false}'
	ipv4_rail_checks
	[[ -n $BAD_ARP ]] || fail "with arpSysctls false, ARP was still answered only on its own rail"
	# Every rail's address is answered on every other rail.
	assert_eq "$(wc -w <<<"$BAD_ARP")" 12 "off-rail ARP answers (4 addresses x 3 other rails)"
}

# Without source routing every address of the flat subnet leaves by the first child (the first
# connected route of 10.20.0.0/16 in the main table): the flows of rails 1..3 leave the wrong way.
test_traffic_ipv4_without_source_routing_wrong_rail() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	flat_pods '{"sourceRouting": false}'
	ipv4_rail_checks
	assert_eq "$BAD_ROUTE" 123 "rails whose flow left the wrong way with sourceRouting false"
}

# --- IPv6 routed rails ---

# routed_rails: per rail N a router rtrN between node A's segment (peerN, 2001:db8:a:N::/64) and
# node B's (a veth, 2001:db8:b:N::/64), radvd on both legs; node B's rail N is the veth's end.
routed_rails() {
	local n conf
	new_node_b
	for n in 0 1 2 3; do
		ip netns add "rtr$n"
		ip netns exec "rtr$n" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.forwarding=1
		ip -n "rtr$n" link set lo up
		ip link set "peer$n" netns "rtr$n"
		ip -n "rtr$n" link add toB type veth peer name "rdma$n" netns nodeB
		ip -n "rtr$n" link set "peer$n" up
		ip -n "rtr$n" link set toB up
		ip -n "rtr$n" addr add "2001:db8:a:$n::1/64" dev "peer$n"
		ip -n "rtr$n" addr add "2001:db8:b:$n::1/64" dev toB
		ip -n nodeB link set "rdma$n" up
		node_b_rxe "$n"
		conf=/tmp/radvd-t$n.conf
		# No MinDelayBetweenRAs below 3 s here: radvd answered "MinDelayBetweenRAs for peer0
		# (0.05) must be at least 3.00" and never set the interfaces up. The default pace is
		# well inside the plugin's raTimeoutMs.
		{
			echo "interface peer$n { AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10; AdvDefaultLifetime 1800;"
			echo "  prefix 2001:db8:a:$n::/64 { AdvOnLink on; AdvAutonomous on; }; };"
			echo "interface toB { AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10; AdvDefaultLifetime 1800;"
			echo "  prefix 2001:db8:b:$n::/64 { AdvOnLink on; AdvAutonomous on; }; };"
		} >"$conf"
		ip netns exec "rtr$n" radvd -C "$conf" -p "/run/radvd-t$n.pid" -m stderr -n >"/tmp/radvd-t$n.log" 2>&1 &
	done
	for n in 0 1 2 3; do
		for _ in $(seq 50); do [[ -s /run/radvd-t$n.pid ]] && break; sleep 0.1; done
		[[ -s /run/radvd-t$n.pid ]] || fail "radvd of rail $n did not start: $(cat "/tmp/radvd-t$n.log")"
	done
}

# routed_pods: pod A and pod B on rails 0..3 by SLAAC; sets ADDR_A[n], ADDR_B[n]
routed_pods() {
	local n node pod side
	routed_rails
	for node in A B; do
		pod=pod$node
		new_pod "$pod"
		in_pod "$pod" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		side=${node,,}
		for n in 0 1 2 3; do
			jq -n --arg m "rdma$n" --arg p "2001:db8:$side:$n::/64" \
				'{cniVersion: "1.0.0", name: "routed", type: "roce-ipvlan", master: $m,
				  ipv6: {slaac: true, prefix: $p}}' >"/tmp/v6-$node-$n.json"
			attach "$node" "$pod" "net$n" "/tmp/v6-$node-$n.json" "/tmp/radvd-t$n.log"
		done
	done
	for n in 0 1 2 3; do
		ADDR_A[n]=$(jq -r '.ips[0].address' "/tmp/podA-net$n.json")
		ADDR_A[n]=${ADDR_A[n]%/*}
		ADDR_B[n]=$(jq -r '.ips[0].address' "/tmp/podB-net$n.json")
		ADDR_B[n]=${ADDR_B[n]%/*}
	done
	note "pod A: ${ADDR_A[*]}"
	note "pod B: ${ADDR_B[*]}"
}

test_traffic_ipv6_routed_rails_stay_on_their_rail() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	local n r carried_a carried_b deltas rc f0 f1
	routed_pods
	for n in 0 1 2 3; do
		f0=$(ip netns exec "rtr$n" cat /sys/class/net/toB/statistics/tx_packets)
		r=$(rail_check "$n" 6)
		f1=$(ip netns exec "rtr$n" cat /sys/class/net/toB/statistics/tx_packets)
		IFS='|' read -r carried_a carried_b deltas rc <<<"$r"
		note "rail $n: ${ADDR_A[n]} -> ${ADDR_B[n]}: ping rc $rc; $deltas; rtr$n forwarded +$((f1 - f0))"
		assert_eq "$rc" 0 "ping on rail $n"
		assert_eq "$carried_a" "$n" "pod A rails whose tx carried rail $n's flow"
		assert_eq "$carried_b" "$n" "pod B rails whose rx carried rail $n's flow"
		((f1 - f0 >= PINGS)) || fail "rail $n's router forwarded only $((f1 - f0)) packets to node B"
	done
}

# --- RoCE v2 between the pods ---

# pod_rxe POD IFNAME NAME ADDR: Soft-RoCE on the pod's own child, created inside the pod; prints
# the index of ADDR's RoCE v2 GID on it. The rail's rxe also lists the child's GID, but only a
# device bound to the child (7.x kernels) sends and receives in the pod's namespace.
pod_rxe() {
	local pod=$1 ifn=$2 dev=$3 addr=$4 want f i
	in_pod "$pod" rdma link add "$dev" type rxe netdev "$ifn"
	want=$(gid_long "$addr")
	[[ $addr == *.* ]] && want=$(gid_of_ipv4 "$addr")
	for _ in $(seq 50); do
		for f in $(in_pod "$pod" grep -lx "$want" /sys/class/infiniband/"$dev"/ports/1/gids/* 2>/dev/null); do
			i=${f##*/}
			[[ $(in_pod "$pod" cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i") == "RoCE v2" ]] || continue
			echo "$i"
			return 0
		done
		sleep 0.1
	done
	fail "no RoCE v2 GID for $addr on $dev in $pod"
}

# roce_pair N: rxe devices on both pods' rail-N children; sets GA, GB
roce_pair() {
	local n=$1
	# The tools' out-of-band TCP exchange connects without binding a source address, so the
	# pod's main table picks the path: in a flat subnet its first route, rail 0's. On a real
	# cluster that exchange runs over the pod network; here a host route in pod A sends it over
	# rail N (IPv4), or it runs over an emulated pod network (oob_link, IPv6: perftest's
	# exchange is IPv4-only). The RoCE packets carry the GID's address as source and follow
	# the plugin's source rule either way.
	[[ -n ${OOB_B:-} ]] || in_pod podA ip route replace "${ADDR_B[n]}/32" dev "net$n" src "${ADDR_A[n]}"
	GA=$(pod_rxe podA "net$n" "rxeA${n}p" "${ADDR_A[n]}")
	GB=$(pod_rxe podB "net$n" "rxeB${n}p" "${ADDR_B[n]}")
}

# oob_link: a veth between the pods standing for the pod network (192.168.100.0/24); sets OOB_B
oob_link() {
	ip link add oob netns podA type veth peer name oob netns podB
	in_pod podA ip addr add 192.168.100.1/24 dev oob
	in_pod podB ip addr add 192.168.100.2/24 dev oob
	in_pod podA ip link set oob up
	in_pod podB ip link set oob up
	OOB_B=192.168.100.2
}

# write_bw N: ib_write_bw from pod A to pod B on rail N; prints the client's result line
write_bw() {
	local n=$1 out a0 b0 a1 b1
	a0=($(counters podA tx)) b0=($(counters podB rx))
	in_pod podB timeout 60 ib_write_bw -d "rxeB${n}p" -x "$GB" -D 2 -s 65536 -F >"/tmp/bw-srv-$n.log" 2>&1 &
	local srv=$!
	sleep 1.5
	run_cmd in_pod podA timeout 60 ib_write_bw -d "rxeA${n}p" -x "$GA" -D 2 -s 65536 -F "${OOB_B:-${ADDR_B[n]}}"
	((RC == 0)) || { kill "$srv" 2>/dev/null; fail "ib_write_bw client on rail $n exited $RC: $OUT $ERR"; }
	wait "$srv" || fail "ib_write_bw server on rail $n: $(cat "/tmp/bw-srv-$n.log")"
	a1=($(counters podA tx)) b1=($(counters podB rx))
	out=$(awk '/^ *65536 /{print}' <<<"$OUT")
	[[ -n $out ]] || fail "no result line from ib_write_bw on rail $n: $OUT"
	local m moved_a="" moved_b=""
	for m in 0 1 2 3; do
		((a1[m] - a0[m] >= 1000)) && moved_a+=$m
		((b1[m] - b0[m] >= 1000)) && moved_b+=$m
	done
	assert_eq "$moved_a/$moved_b" "$n/$n" "rails that carried rail $n's RoCE traffic (pod A tx / pod B rx)"
	read -r _ iters _ avg _ <<<"$out"
	echo "rail $n (${ADDR_A[n]} -> ${ADDR_B[n]}, GID $GA -> $GB): ib_write_bw 64 KiB x $iters in 2 s: $avg MB/s; pod A net$n tx +$((a1[n] - a0[n])) pkts"
}

pingpong() { # pingpong N: ibv_rc_pingpong on rail N; prints its summary
	local n=$1
	in_pod podB timeout 60 ibv_rc_pingpong -d "rxeB${n}p" -g "$GB" -n 50 >"/tmp/pp-srv-$n.log" 2>&1 &
	local srv=$!
	sleep 1
	run_cmd in_pod podA timeout 60 ibv_rc_pingpong -d "rxeA${n}p" -g "$GA" -n 50 "${OOB_B:-${ADDR_B[n]}}"
	((RC == 0)) || { kill "$srv" 2>/dev/null; fail "ibv_rc_pingpong on rail $n exited $RC: $OUT $ERR"; }
	wait "$srv" || fail "ibv_rc_pingpong server on rail $n: $(cat "/tmp/pp-srv-$n.log")"
	echo "rail $n ibv_rc_pingpong: $(grep -E 'iters in' <<<"$OUT")"
}

test_traffic_roce_ipv4_flat_rails() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	local n GA GB r
	assert_match "$(rdma system)" "netns shared" "RDMA netns mode"
	flat_pods
	for n in 0 1 2 3; do
		roce_pair "$n"
		r=$(write_bw "$n")
		note "$r"
	done
	r=$(pingpong 1)
	note "$r"
}

test_traffic_roce_ipv6_routed_rails() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B
	local n GA GB r OOB_B
	routed_pods
	oob_link
	for n in 0 1 2 3; do
		roce_pair "$n"
		r=$(write_bw "$n")
		note "$r"
	done
	r=$(pingpong 3)
	note "$r"
}
