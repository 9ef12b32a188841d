# shellcheck shell=bash
# A rail's router for the routed IPv6 rails (the B300 layout), shared by the VM suite
# (tests/vm/suite/15-ipv6.sh) and the Kubernetes suite (tests/k8s/suite/lib.sh); sourced, not
# run. tests/vm/run.sh gives each rail's L2 segment a second NIC, peerN, left down in the
# initial namespace; rail N's router is radvd in netns rtrN on peerN.
#
#   rail_router_start N PREFIX...   (re)starts rail N's router announcing PREFIXes (SLAAC), as
#                                   a rail router announces a node's own /64 on that rail;
#                                   RADVD_OPTS adds interface options (e.g. "AdvRetransTimer
#                                   1000;"). Returns 1, saying why on stderr, when it cannot.
#   rail_router_stop N              radvd stopped, peerN back in the initial namespace.

rail_router_start() {
	local n=$1 p conf=/run/radvd-rail$1.conf log=/run/radvd-rail$1.log pid=/run/radvd-rail$1.pid
	shift
	rail_router_stop "$n"
	ip link show "peer$n" >/dev/null 2>&1 || {
		echo "rail_router_start: no NIC peer$n on rail $n's segment (tests/vm/run.sh gives one per rail up to VM_PEERS)" >&2
		return 1
	}
	ip netns add "rtr$n"
	# A NIC moved into a namespace takes that namespace's defaults: no DAD for the router's
	# link-local, so radvd can send from it at once.
	ip netns exec "rtr$n" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.forwarding=1
	ip link set "peer$n" netns "rtr$n"
	ip -n "rtr$n" link set lo up
	ip -n "rtr$n" link set "peer$n" up
	{
		echo "interface peer$n {"
		echo "  AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10; AdvDefaultLifetime 1800; ${RADVD_OPTS:-}"
		for p in "$@"; do echo "  prefix $p { AdvOnLink on; AdvAutonomous on; };"; done
		echo "};"
	} >"$conf"
	ip netns exec "rtr$n" radvd -C "$conf" -p "$pid" -m stderr -n >"$log" 2>&1 &
	for _ in $(seq 50); do [[ -s $pid ]] && return 0; sleep 0.1; done
	echo "rail_router_start: radvd on rail $n did not start: $(cat "$log")" >&2
	return 1
}

rail_router_stop() {
	local n=$1 pid=/run/radvd-rail$1.pid
	if [[ -s $pid ]]; then
		kill "$(cat "$pid")" 2>/dev/null || true
		rm -f "$pid"
	fi
	if [[ -e /run/netns/rtr$n ]]; then
		ip netns del "rtr$n"
		# A physical NIC returns to the initial namespace when its namespace is torn down,
		# which happens asynchronously.
		for _ in $(seq 100); do ip link show "peer$n" >/dev/null 2>&1 && break; sleep 0.05; done
	fi
}
