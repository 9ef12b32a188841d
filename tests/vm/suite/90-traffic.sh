# shellcheck shell=bash
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
# Then RoCE v2 with perftest on every rail, and UCX (ucx_perftest started through
# `roce-ipvlan env --exec`) and RDMA CM (rping) on rail 0 (docs/traffic.md#ucx, #rdma-cm).
#
# These tests need a kernel whose Soft-RoCE carries traffic for an address in another netns
# (7.x): 'make vm-traffic' boots trixie-backports' kernel and runs them. suite/run.sh leaves
# them out unless a pattern selects them.

PINGS=10
# Rails the pods of flat_pods/routed_pods are attached to (the UCX and RDMA CM tests use one).
POD_RAILS=(0 1 2 3)
# Rail rxe devices of node A a test deleted ("DEV NETDEV"); traffic_cleanup adds them back.
RAIL_RXE_DELETED=()

traffic_cleanup() {
	local n
	for n in 0 1 2 3; do
		[[ -s /run/radvd-t$n.pid ]] && kill "$(cat "/run/radvd-t$n.pid")" 2>/dev/null
		rm -f "/run/radvd-t$n.pid"
	done
	cleanup_pods
	restore_rail_rxe
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
	node_b_flat
	flat_new_pods
	flat_attach "${1:-{\}}"
}

# flat_new_pods: pod A and pod B, no IPv6 of their own, not attached to anything yet
flat_new_pods() {
	local pod
	for pod in podA podB; do
		new_pod "$pod"
		in_pod "$pod" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	done
}

# flat_attach EXTRA_JSON: the ADDs of flat_pods, for pods that exist (node_b_flat, flat_new_pods)
flat_attach() {
	local extra=$1 n node pod range
	for node in A B; do
		pod=pod$node
		[[ $node == A ]] && range=1 || range=2
		jq -n --arg dir "/var/lib/cni/node$node" --arg s "10.20.$range.1" --arg e "10.20.$range.254" \
			--argjson extra "$extra" \
			'{cniVersion: "1.0.0", name: "flat", type: "roce-ipvlan",
			  ipam: {type: "host-local", subnet: "10.20.0.0/16", rangeStart: $s, rangeEnd: $e,
			         dataDir: $dir}} + $extra' >"/tmp/flat-$node.json"
		for n in "${POD_RAILS[@]}"; do
			jq --arg m "rdma$n" '. + {master: $m}' "/tmp/flat-$node.json" >"/tmp/flat-$node-$n.json"
			attach "$node" "$pod" "net$n" "/tmp/flat-$node-$n.json"
		done
	done
	for n in "${POD_RAILS[@]}"; do
		ADDR_A[n]=$(jq -r '.ips[0].address' "/tmp/podA-net$n.json")
		ADDR_A[n]=${ADDR_A[n]%/*}
		ADDR_B[n]=$(jq -r '.ips[0].address' "/tmp/podB-net$n.json")
		ADDR_B[n]=${ADDR_B[n]%/*}
	done
	note "pod A: ${ADDR_A[*]}; pod B: ${ADDR_B[*]} (rails ${POD_RAILS[*]})"
}

counters() { # counters ARRAY POD DIR: ARRAY=(<net0> <net1> <net2> <net3>), DIR (tx|rx) packet counters
	local -n into=$1
	local n
	into=()
	for n in 0 1 2 3; do into+=("$(in_pod "$2" cat "/sys/class/net/net$n/statistics/$3_packets")"); done
}

# rail_check N [FAMILY]: ping pod B's rail-N address from pod A's rail-N address; print
# "<rails whose tx moved in A>|<rails whose rx moved in B>|<deltas>|<ping rc>". A rail counts as
# carrying the flow when its counter moved by at least PINGS.
rail_check() {
	local n=$1 fam=${2:-4} a0 b0 a1 b1 m da db carried_a="" carried_b="" deltas="" rc=0
	counters a0 podA tx
	counters b0 podB rx
	in_pod podA ping -"$fam" -q -c "$PINGS" -i 0.1 -W 2 -I "${ADDR_A[n]}" "${ADDR_B[n]}" >/tmp/ping.log 2>&1 || rc=$?
	((rc == 0)) || echo "  - ping: $(tr '\n' ' ' </tmp/ping.log)" >&2
	counters a1 podA tx
	counters b1 podB rx
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

# routed_pods [placeholder]: pod A and pod B on POD_RAILS by SLAAC; sets ADDR_A[n], ADDR_B[n]
# (the SLAAC addresses). With "placeholder" each attachment also gets a placeholder address
# from host-local (fd01:0:0:100::/112, one range per node), as the chains being migrated from
# give (docs/ipv6.md): its GID sits below the SLAAC one on the rail's device.
routed_pods() {
	local placeholder=${1:-} n node pod side ipam h
	routed_rails
	for node in A B; do
		pod=pod$node
		new_pod "$pod"
		in_pod "$pod" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
		side=${node,,}
		for n in "${POD_RAILS[@]}"; do
			ipam='{}'
			if [[ -n $placeholder ]]; then
				[[ $node == A ]] && h=1$n || h=2$n
				ipam=$(jq -n --arg s "fd01:0:0:100::${h}0" --arg e "fd01:0:0:100::${h}f" --arg dir "/var/lib/cni/node$node" \
					'{ipam: {type: "host-local", subnet: "fd01:0:0:100::/112", rangeStart: $s, rangeEnd: $e, dataDir: $dir}}')
			fi
			jq -n --arg m "rdma$n" --arg p "2001:db8:$side:$n::/64" --argjson ipam "$ipam" \
				'{cniVersion: "1.0.0", name: "routed", type: "roce-ipvlan", master: $m,
				  ipv6: {slaac: true, prefix: $p}} + $ipam' >"/tmp/v6-$node-$n.json"
			attach "$node" "$pod" "net$n" "/tmp/v6-$node-$n.json" "/tmp/radvd-t$n.log"
		done
	done
	for n in "${POD_RAILS[@]}"; do
		ADDR_A[n]=$(jq -r '[.ips[].address | select(startswith("2001:db8:"))][0]' "/tmp/podA-net$n.json")
		ADDR_A[n]=${ADDR_A[n]%/*}
		ADDR_B[n]=$(jq -r '[.ips[].address | select(startswith("2001:db8:"))][0]' "/tmp/podB-net$n.json")
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
	counters a0 podA tx
	counters b0 podB rx
	in_pod podB timeout 60 ib_write_bw -d "rxeB${n}p" -x "$GB" -D 2 -s 65536 -F >"/tmp/bw-srv-$n.log" 2>&1 &
	local srv=$!
	sleep 1.5
	run_cmd in_pod podA timeout 60 ib_write_bw -d "rxeA${n}p" -x "$GA" -D 2 -s 65536 -F "${OOB_B:-${ADDR_B[n]}}"
	((RC == 0)) || { kill "$srv" 2>/dev/null; fail "ib_write_bw client on rail $n exited $RC: $OUT $ERR"; }
	wait "$srv" || fail "ib_write_bw server on rail $n: $(cat "/tmp/bw-srv-$n.log")"
	counters a1 podA tx
	counters b1 podB rx
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

# --- UCX between the pods, started through `roce-ipvlan env --exec` (docs/traffic.md#ucx) ---

# What the job itself sets; env --exec adds the device and GID settings. UCX_TLS: RC for the
# data, UD for UCP's wireup (UCX 1.13 has no other auxiliary transport for RC), and no shared
# memory or TCP, which would connect two pods of one VM without the rails at all.
# UCX_UD_ETH_DGID_CHECK=n: UD drops every packet whose GRH destination GID is not its own
# (default y); with Soft-RoCE every wireup packet is dropped that way and wireup times out.
# UCX_UD_TIMEOUT bounds how long a failing wireup takes (default 30 s).
UCX_JOB=("UCX_TLS=rc_verbs,ud_verbs" UCX_UD_ETH_DGID_CHECK=n UCX_UD_TIMEOUT=10s)
UCX_PORT=13411

# rail_rxe_alias POD IFNAME DEV: points the child's ifalias at DEV, the pod's own rxe on it, and
# at the index of the alias's GID there. On a NIC the rail's RDMA device is the one that
# carries the pod's RoCE and ADD names it; here only an rxe on the child does (see "What this
# emulates"), so the test moves the alias to the device that carries the traffic, with the
# address (GID) ADD reported. env then checks it against DEV's live GID table like any alias.
rail_rxe_alias() {
	local pod=$1 ifn=$2 dev=$3 alias kv gid="" want f idx=""
	alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
	for kv in $alias; do [[ $kv == gid=* ]] && gid=${kv#gid=}; done
	[[ -n $gid ]] || fail "$pod $ifn: no GID in its alias '$alias'"
	want=$(gid_long "$gid")
	for f in $(in_pod "$pod" grep -lx "$want" /sys/class/infiniband/"$dev"/ports/1/gids/*); do
		[[ $(in_pod "$pod" cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/${f##*/}") == "RoCE v2" ]] && idx=${f##*/}
	done
	[[ -n $idx ]] || fail "$pod: GID $gid of $ifn is not on $dev"
	in_pod "$pod" ip link set dev "$ifn" alias "rdma_dev=$dev port=1 gid_index=$idx gid=$gid"
}

# gid_table POD DEV: "index=GID" for every non-empty slot of DEV's port 1, as the pod sees it
# (one grep: a process per slot of the 1024 would take minutes under TCG)
gid_table() {
	in_pod "$1" grep -rvx '0000:0000:0000:0000:0000:0000:0000:0000' "/sys/class/infiniband/$2/ports/1/gids/" |
		sed 's|.*/||' | sort -n | tr ':' ' ' | awk '{printf "%s=%s:%s:%s:%s:%s:%s:%s:%s ", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
}

rxe_sent() { rdma statistic show link "$1/1" | grep -oE 'sent_pkts [0-9]+' | awk '{print $2}'; }

# ucx_perftest_pair NAME MODE ARGS...: ucx_perftest server in pod B, client in pod A (ARGS),
# over rail 0, the job environment UCX_JOB plus, by MODE:
#   env    started through `roce-ipvlan env --exec` (the pods' own settings)
#   alone  only UCX_NET_DEVICES=<the pod's rxe>:1, no GID setting: UCX picks the GID itself
#   forced UCX_NET_DEVICES and UCX_IB_GID_INDEX=$FORCE_A (pod A) / $FORCE_B (pod B)
# The pods' RDMA devices are PT_DEV_A and PT_DEV_B (default: their own rxe, rxeA0p and rxeB0p).
# Sets PT_RC (client), PT_SRV_RC, PT_OUT (client stdout+stderr), PT_SENT (packets pod A's
# device sent), PT_GID (the GID index UCX chose by itself in pod A, from its debug log; "" if
# none).
ucx_perftest_pair() {
	local name=$1 mode=$2 srv s0 pre_a pre_b dev_a=${PT_DEV_A:-rxeA0p} dev_b=${PT_DEV_B:-rxeB0p}
	shift 2
	case $mode in
	env)
		pre_a=("$CNI_BIN_DIR/roce-ipvlan" env --exec --)
		pre_b=("$CNI_BIN_DIR/roce-ipvlan" env --exec --)
		;;
	alone)
		pre_a=(env UCX_NET_DEVICES="$dev_a:1" UCX_LOG_LEVEL=debug)
		pre_b=(env UCX_NET_DEVICES="$dev_b:1")
		;;
	forced)
		pre_a=(env UCX_NET_DEVICES="$dev_a:1" UCX_IB_GID_INDEX="$FORCE_A")
		pre_b=(env UCX_NET_DEVICES="$dev_b:1" UCX_IB_GID_INDEX="$FORCE_B")
		;;
	esac
	s0=$(rxe_sent "$dev_a")
	in_pod podB env "${UCX_JOB[@]}" timeout 90 "${pre_b[@]}" ucx_perftest -p "$UCX_PORT" >"/tmp/ucx-srv-$name.log" 2>&1 &
	srv=$!
	sleep 2 # the server listens on its out-of-band TCP port
	PT_RC=0 PT_SRV_RC=0
	in_pod podA env "${UCX_JOB[@]}" timeout 90 "${pre_a[@]}" ucx_perftest "${OOB_B:-${ADDR_B[0]}}" -p "$UCX_PORT" "$@" \
		>"/tmp/ucx-cli-$name.log" 2>&1 || PT_RC=$?
	# A client that failed leaves the server waiting for it.
	((PT_RC == 0)) || kill "$srv" 2>/dev/null || true
	wait "$srv" || PT_SRV_RC=$?
	PT_SENT=$(($(rxe_sent "$dev_a") - s0))
	PT_GID=$(grep -oE "$dev_a:1 using gid_index [0-9]+" "/tmp/ucx-cli-$name.log" | awk '{print $NF}' | head -n 1 || true)
	PT_OUT=$(grep -vE '^\[[0-9.]+\] .* (DEBUG|TRACE) ' "/tmp/ucx-cli-$name.log" | grep -vE '^\|' | tail -n 12)
}

# ucx_pods_ready: pod rxe devices (roce_pair, sets GA, GB) on rail 0 of both pods, the aliases pointed at them; shows
# what env --exec will set in each pod.
ucx_pods_ready() {
	local pod dev
	roce_pair 0
	for pod in podA podB; do
		dev=rxe${pod#pod}0p
		rail_rxe_alias "$pod" net0 "$dev"
		note "$pod: $dev GIDs $(gid_table "$pod" "$dev"); env: $(in_pod "$pod" "$CNI_BIN_DIR/roce-ipvlan" env | grep '^export' | tr '\n' ' ')"
	done
}

# ucx_passes WHAT: the last ucx_perftest_pair passed over pod A's rxe; notes the bandwidth
ucx_passes() {
	local final bw_avg
	((PT_RC == 0 && PT_SRV_RC == 0)) || fail "$1: ucx_perftest exited $PT_RC (server $PT_SRV_RC): $PT_OUT; server: $(tail -n 5 /tmp/ucx-srv-*.log | tr '\n' ' ')"
	final=$(grep -E '^Final:' <<<"$PT_OUT") || fail "$1: no Final line: $PT_OUT"
	# 200 x 64 KiB at RoCE MTU 1024 is 12 800 packets; shared memory or TCP would send none.
	((PT_SENT >= 10000)) || fail "$1: pod A's rxe sent only $PT_SENT packets: the data did not go over RoCE"
	read -r _ _ _ _ _ bw_avg _ <<<"$final"
	note "$1: ucp_put_bw 64 KiB x 200: $bw_avg MB/s; pod A rxe sent $PT_SENT packets"
}

UCX_ARGS=(-t ucp_put_bw -s 65536 -n 200 -w 10)

test_traffic_ucx_ipv4_flat_rail() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB
	flat_pods
	ucx_pods_ready
	# No GID setting at all: on an IPv4 rail UCX's first choice (RoCE v2, IPv4) is the pod's GID.
	ucx_perftest_pair v4-alone alone "${UCX_ARGS[@]}"
	ucx_passes "IPv4, no GID setting"
	assert_eq "$PT_GID" "$GA" "GID index UCX chose by itself on rxeA0p"
	ucx_perftest_pair v4-env env "${UCX_ARGS[@]}"
	ucx_passes "IPv4, through env --exec"
}

# The report's trap on a routed IPv6 rail: UCX left alone takes a GID below the pod's SLAAC one
# and fails; through env --exec it passes. Failing without env's settings is asserted, so the
# passing case cannot pass for another reason.
test_traffic_ucx_ipv6_placeholder_trap() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB OOB_B chosen
	routed_pods placeholder
	oob_link
	ucx_pods_ready
	ucx_perftest_pair v6p-alone alone "${UCX_ARGS[@]}"
	chosen=$(in_pod podA cat "/sys/class/infiniband/rxeA0p/ports/1/gids/$PT_GID" 2>/dev/null || true)
	note "UCX alone: GID index ${PT_GID:-?} ($chosen), exit $PT_RC: $(tail -n 3 <<<"$PT_OUT" | tr '\n' ' ')"
	[[ -n $PT_GID && $PT_GID != "$GA" ]] || fail "UCX alone chose GID index '${PT_GID}', the pod's SLAAC GID is $GA: the trap is gone (docs/traffic.md#ucx must change)"
	((PT_GID < GA)) || fail "UCX alone chose index $PT_GID, above the SLAAC GID's $GA"
	((PT_RC != 0)) || fail "UCX with GID index $PT_GID ($chosen) passed: the trap is gone (docs/traffic.md#ucx must change)"
	# The field report's UCX took the placeholder's GID (the lowest global one where link-local
	# GIDs are hidden or skipped): with it the run fails the same way.
	local FORCE_A FORCE_B ph
	ph=$(jq -r '[.ips[].address | select(startswith("fd01:"))][0]' /tmp/podA-net0.json)
	FORCE_A=$(in_pod podA grep -lx "$(gid_long "${ph%/*}")" /sys/class/infiniband/rxeA0p/ports/1/gids/*) || fail "no GID for pod A's placeholder $ph"
	FORCE_A=${FORCE_A##*/}
	ph=$(jq -r '[.ips[].address | select(startswith("fd01:"))][0]' /tmp/podB-net0.json)
	FORCE_B=$(in_pod podB grep -lx "$(gid_long "${ph%/*}")" /sys/class/infiniband/rxeB0p/ports/1/gids/*) || fail "no GID for pod B's placeholder $ph"
	FORCE_B=${FORCE_B##*/}
	ucx_perftest_pair v6p-placeholder forced "${UCX_ARGS[@]}"
	note "UCX on the placeholder's GID (index $FORCE_A / $FORCE_B): exit $PT_RC: $(grep -E 'ERROR' <<<"$PT_OUT" | tail -n 1)"
	((PT_RC != 0)) || fail "UCX on the placeholder's GID passed: the placeholder routes now (docs/traffic.md#ucx must change)"
	ucx_perftest_pair v6p-env env "${UCX_ARGS[@]}"
	ucx_passes "IPv6 with a placeholder, through env --exec"
}

test_traffic_ucx_ipv6_slaac_rail() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB OOB_B
	routed_pods
	oob_link
	ucx_pods_ready
	ucx_perftest_pair v6-env env "${UCX_ARGS[@]}"
	ucx_passes "IPv6 without a placeholder, through env --exec"
}

# --- RDMA CM between the pods (docs/traffic.md#rdma-cm) ---

# drop_rail_rxe: deletes rail 0's rxe on both nodes, leaving the pods' own rxe devices as the only
# ones holding the pods' rail-0 GIDs (on a NIC the rail's device is the only one anyway).
drop_rail_rxe() {
	local dev
	dev=$(rail_rdma_dev rdma0)
	rdma link del "$dev"
	RAIL_RXE_DELETED+=("$dev rdma0")
	ip netns exec nodeB rdma link del rxeB0 # node B's go with nodeB at cleanup anyway
}

restore_rail_rxe() {
	local entry dev netdev
	for entry in "${RAIL_RXE_DELETED[@]}"; do
		read -r dev netdev <<<"$entry"
		rdma link add "$dev" type rxe netdev "$netdev"
	done
	RAIL_RXE_DELETED=()
}

# rping_pair: rping server in pod B on its rail-0 address, client in pod A from its own (3
# round trips, verbose); sets RP_RC (client) and RP_OUT (client output)
rping_pair() {
	local srv
	in_pod podB timeout 60 rping -s -a "${ADDR_B[0]}" -C 3 -v >/tmp/rping-srv.log 2>&1 &
	srv=$!
	sleep 2 # the server binds and listens
	RP_RC=0
	RP_OUT=$(in_pod podA timeout 60 rping -c -a "${ADDR_B[0]}" -I "${ADDR_A[0]}" -C 3 -v 2>&1) || RP_RC=$?
	((RP_RC == 0)) || kill "$srv" 2>/dev/null || true
	wait "$srv" || true
}

# rdmacm_checks: with two devices holding each pod's GID (the rail's rxe and the pod's own),
# rdma_cm binds to the rail's (the first registered) on both sides; the connect request arrives
# at pod B's own rxe, where nothing listens: rejected, reason 8 (invalid service ID). Asserted,
# so that a change in rdma_cm's device choice shows. With only the pods' own devices rping works.
rdmacm_checks() {
	local want=$1 s0
	rping_pair
	note "rping with the rail's rxe present: exit $RP_RC: $(grep -E 'RDMA_CM_EVENT|error' <<<"$RP_OUT" | head -n 2 | tr '\n' ' ')"
	if ((RP_RC == 0)) || [[ $RP_OUT != *"$want"* ]]; then
		fail "rping no longer fails with '$want' while two RDMA devices hold the pod's GID (exit $RP_RC: $RP_OUT): rdma_cm's device choice changed, docs/traffic.md#rdma-cm must change"
	fi
	drop_rail_rxe
	s0=$(rxe_sent rxeA0p)
	rping_pair
	((RP_RC == 0)) || fail "rping between the pods' own rxe devices exited $RP_RC: $RP_OUT; server: $(tail -n 5 /tmp/rping-srv.log)"
	[[ $RP_OUT == *"ping data: rdma-ping-2"* ]] || fail "rping printed no third ping: $RP_OUT"
	(($(rxe_sent rxeA0p) - s0 > 0)) || fail "pod A's rxe sent nothing during rping"
	note "rping over the pods' own rxe: 3 pings, pod A's rxe sent $(($(rxe_sent rxeA0p) - s0)) packets"
}

test_traffic_rdmacm_rping_ipv4() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB
	flat_pods
	roce_pair 0
	rdmacm_checks "RDMA_CM_EVENT_REJECTED, error 8"
}

test_traffic_rdmacm_rping_ipv6() {
	require_plugin
	trap traffic_cleanup EXIT
	local -a ADDR_A ADDR_B POD_RAILS=(0)
	local GA GB OOB_B
	routed_pods
	oob_link # roce_pair's out-of-band path (rping itself needs none)
	roce_pair 0
	rdmacm_checks "RDMA_CM_EVENT_UNREACHABLE"
}
