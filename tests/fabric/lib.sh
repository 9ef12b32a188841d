# shellcheck shell=bash
# FABRIC_LIB: what a fabric SCRIPT (tests/fabric/run.sh) and the hosts share. Sourced on every
# host; the VM's own helpers (tests/vm/lib.sh: cni_exec, rail_rdma_dev, CNI_PATH) are there too.
#
#   on HOST CMD...          run CMD (its words as given) on HOST (a, b, or r with routed6) as
#                           root, print its stdout and stderr, return its exit status. CMD
#                           starts in the repository with these helpers sourced and stdin
#                           empty; `on b ... &` runs several at once. Files to hand over go
#                           through $FABRIC_SHARE (/run/fabric, mounted on every host).
#   fabric_addr HOST RAIL   HOST's own address on rail RAIL (0..3) without prefix length:
#                           IPv4 with flat, its SLAAC address with routed6
#   fabric_mac HOST RAIL    the MAC of HOST's rail NIC RAIL (a pod's IPvlan child shares it)
#   fabric_prefix HOST RAIL routed6: the /64 of HOST's segment of rail RAIL (2001:db8:a:0::/64)
#   rail_bytes HOST DIR     "b0 b1 b2 b3": the byte counters (DIR tx or rx) of HOST's rail NICs;
#   rail_packets HOST DIR   the same in packets
#   fabric_pod_range HOST   flat: "FIRST LAST" of 172.16.0.0/16 that no host address uses, for
#                           HOST's pods (a: 172.16.1.1-172.16.1.254, b: 172.16.2.1-...)
#   fabric_pod_network NETNS  gives the netns (on this host) the cluster network: eth0, a veth
#                           to the host, with the next free 10.244.<n>.<k>/24 (n: a=1, b=2) and
#                           a default route; the host routes 10.244.<other>.0/24 over its own
#                           eth0 (10.88.0.<n>/24) to the other host. Prints the address. The
#                           perftests' and UCX's out-of-band exchange go this way, not by a rail
#   FABRIC_LAYOUT           flat or routed6
#   FABRIC_HOST             the host this runs on (a, b or r)
#   FABRIC_RAILS            rdma0 rdma1 rdma2 rdma3
#   FABRIC_SUBNET4          flat: 172.16.0.0/16, the one subnet of every rail

# shellcheck source=../nap.sh
source "${BASH_SOURCE[0]%/*}/../nap.sh"

FABRIC_SHARE=/run/fabric
FABRIC_RAILS="rdma0 rdma1 rdma2 rdma3"
FABRIC_SUBNET4=172.16.0.0/16
FABRIC_HOST=${VM_NAME:-a}
FABRIC_LIB=${FABRIC_LIB:-$ROCE_REPO/tests/fabric/lib.sh}
export FABRIC_SHARE FABRIC_RAILS FABRIC_SUBNET4 FABRIC_HOST FABRIC_LIB

# Hosts by number (a=1, b=2): flat host addresses are 172.16.0.<10*n + rail>.
fabric_host_number() {
	case $1 in a) echo 1 ;; b) echo 2 ;; *) echo "fabric: no host '$1' (a or b)" >&2; return 2 ;; esac
}

fabric_addr() { # fabric_addr HOST RAIL
	local f=$FABRIC_SHARE/addr/$1 addr
	[[ -s $f ]] || { echo "fabric_addr: host '$1' has published no addresses" >&2; return 1; }
	addr=$(awk -v r="rdma$2" '$1 == r {print $2}' "$f")
	[[ -n $addr ]] || { echo "fabric_addr: host $1 has no rail $2" >&2; return 1; }
	echo "$addr"
}

fabric_mac() { # fabric_mac HOST RAIL
	local f=$FABRIC_SHARE/addr/$1
	awk -v r="rdma$2" '$1 == r {print $3; found = 1} END {exit !found}' "$f" ||
		{ echo "fabric_mac: host $1 has no rail $2" >&2; return 1; }
}

fabric_prefix() { # fabric_prefix HOST RAIL
	[[ $1 == a || $1 == b ]] || { echo "fabric_prefix: no host '$1' (a or b)" >&2; return 2; }
	echo "2001:db8:$1:$2::/64"
}

fabric_pod_range() { # fabric_pod_range HOST
	local n
	n=$(fabric_host_number "$1") || return
	echo "172.16.$n.1 172.16.$n.254"
}

rail_bytes() { rail_counters "$1" "$2" bytes; }
rail_packets() { rail_counters "$1" "$2" packets; }
rail_counters() { # rail_counters HOST DIR UNIT
	# shellcheck disable=SC2016 # expanded on the host
	on "$1" bash -c 'for r in $FABRIC_RAILS; do printf "%s " "$(cat /sys/class/net/$r/statistics/$0_$1)"; done' "$2" "$3"
}

# on HOST CMD...: a request is a script in $FABRIC_SHARE/req/HOST/ (written whole, then
# renamed), which HOST's agent (agent.sh) runs; it leaves ID.out, ID.err and last ID.rc.
FABRIC_ON_SEQ=0
on() {
	(($# >= 2)) || { echo "usage: on HOST CMD..." >&2; return 2; }
	local host=$1 id dir cmd rc
	shift
	if [[ $host == "$FABRIC_HOST" ]]; then
		(cd "$ROCE_REPO" && "$@" </dev/null)
		return
	fi
	dir=$FABRIC_SHARE/req/$host
	[[ -d $dir ]] || { echo "on: no host '$host' on this fabric (${FABRIC_LAYOUT:-?} layout)" >&2; return 2; }
	FABRIC_ON_SEQ=$((FABRIC_ON_SEQ + 1))
	id=$FABRIC_HOST-$BASHPID-$FABRIC_ON_SEQ-$RANDOM
	printf -v cmd '%q ' "$@"
	printf '%s\n' "$cmd" >"$dir/.$id.tmp"
	mv "$dir/.$id.tmp" "$dir/$id.cmd"
	while [[ ! -e $dir/$id.rc ]]; do
		if [[ -e $FABRIC_SHARE/gone-$host ]]; then
			echo "on: host $host's VM has ended (its log follows the run)" >&2
			return 255
		fi
		nap 0.05
	done
	cat "$dir/$id.out"
	cat "$dir/$id.err" >&2
	rc=$(cat "$dir/$id.rc")
	rm -f "$dir/$id".{cmd,run,out,err,rc}
	return "$rc"
}

# fabric_wait_ready HOST SECONDS: wait until HOST's agent said ready (ready-HOST in the share);
# 1 with the reason on stderr when its VM ended first or SECONDS passed.
fabric_wait_ready() {
	local host=$1 limit=$2 start=$SECONDS
	while ((SECONDS - start < limit)); do
		[[ -e $FABRIC_SHARE/ready-$host ]] && return 0
		if [[ -e $FABRIC_SHARE/gone-$host ]]; then
			echo "fabric: host $host's VM ended (tests/vm/run.sh exit code $(cat "$FABRIC_SHARE/gone-$host")) before it was ready, after $((SECONDS - start)) s of waiting; its log follows the run" >&2
			return 1
		fi
		nap 0.1
	done
	[[ -e $FABRIC_SHARE/ready-$host ]] && return 0
	echo "fabric: host $host was not ready after $limit s; its log follows the run" >&2
	return 1
}

# --- host set-up (agent.sh and host-a.sh call it once, before the host is "ready") ---

fabric_publish_addrs() { # the "RAIL ADDRESS MAC" lines fabric_addr reads
	local rail addr tmp=$FABRIC_SHARE/addr/.$FABRIC_HOST.tmp
	: >"$tmp"
	for rail in $FABRIC_RAILS; do
		if [[ $FABRIC_LAYOUT == flat ]]; then
			addr=$(ip -4 -o addr show dev "$rail" | awk '{split($4, a, "/"); print a[1]; exit}')
		else
			addr=$(ip -6 -o addr show dev "$rail" scope global | awk '{split($4, a, "/"); print a[1]; exit}')
		fi
		echo "$rail $addr $(cat "/sys/class/net/$rail/address")" >>"$tmp"
	done
	mv "$tmp" "$FABRIC_SHARE/addr/$FABRIC_HOST"
}

# A host: its rail addresses as an operator gives them. flat: 172.16.0.<10n+i>/16 on rail i,
# with the ARP sysctls a node of one subnet on many rails needs (each rail answers only for its
# own address, and speaks with it), a routing table per rail for what leaves from its address,
# and no IPv6 on the rails (no chatter in the counters).
# routed6: SLAAC from the router on each rail, no forwarding.
fabric_host_setup() {
	local n i=0 rail other
	n=$(fabric_host_number "$FABRIC_HOST")
	other=$((3 - n))
	# The cluster network (eth0) and the pods behind each host.
	sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.eth0.disable_ipv6=1
	ip addr add "10.88.0.$n/24" dev eth0
	ip route add "10.244.$other.0/24" via "10.88.0.$other" dev eth0
	if [[ $FABRIC_LAYOUT == flat ]]; then
		for rail in $FABRIC_RAILS; do
			# Per rail, not in conf/all: a new namespace inherits conf/all's IPv4 settings
			# (net.core.devconf_inherit_init_net=0), and the pods must start from the
			# kernel's defaults, as on a node where only the rails are configured.
			sysctl -qw "net.ipv4.conf.$rail.arp_ignore=1" "net.ipv4.conf.$rail.arp_announce=2"
			sysctl -qw "net.ipv6.conf.$rail.disable_ipv6=1"
			ip addr add "172.16.0.$((10 * n + i))/16" dev "$rail"
			# Replies from a rail's address leave by that rail (a table per rail).
			ip route add 172.16.0.0/16 dev "$rail" src "172.16.0.$((10 * n + i))" table $((100 + i))
			ip rule add from "172.16.0.$((10 * n + i))" lookup $((100 + i)) priority $((100 + i))
			i=$((i + 1))
		done
	else
		# The router boots beside this host and may come up minutes later on a loaded machine
		# (two routed6 runs inside make test failed so: host a gave up on SLAAC after 90 s while
		# r had not yet printed a line). Wait until its radvd runs, then solicit.
		fabric_wait_ready r 600 || return 1
		for rail in $FABRIC_RAILS; do
			sysctl -qw "net.ipv6.conf.$rail.accept_ra=2" "net.ipv6.conf.$rail.accept_dad=0"
			# A link bounce makes the kernel solicit a router at once.
			ip link set "$rail" down
			ip link set "$rail" up
		done
		for rail in $FABRIC_RAILS; do
			# radvd answers a solicitation at once; 90 s covers its periodic advertisements too.
			for _ in $(seq 900); do
				[[ -n $(ip -6 -o addr show dev "$rail" scope global) ]] && break
				sleep 0.1
			done
			[[ -n $(ip -6 -o addr show dev "$rail" scope global) ]] ||
				{ echo "fabric: host $FABRIC_HOST got no SLAAC address on $rail in 90 s" >&2; return 1; }
		done
	fi
	fabric_publish_addrs
}

# The rail router (routed6): ra<i> faces a's rail i, rb<i> b's; its own ::1 in each /64,
# forwarding between them, radvd on all eight legs.
fabric_router_setup() {
	local i h conf=/run/radvd-fabric.conf
	sysctl -qw net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.accept_dad=0
	: >"$conf"
	for i in 0 1 2 3; do
		for h in a b; do
			sysctl -qw "net.ipv6.conf.r$h$i.accept_dad=0"
			ip addr add "2001:db8:$h:$i::1/64" dev "r$h$i"
			{
				echo "interface r$h$i { AdvSendAdvert on; MinRtrAdvInterval 3; MaxRtrAdvInterval 10; AdvDefaultLifetime 1800;"
				echo "  prefix 2001:db8:$h:$i::/64 { AdvOnLink on; AdvAutonomous on; }; };"
			} >>"$conf"
		done
	done
	radvd -C "$conf" -p /run/radvd-fabric.pid -m logfile -l /run/radvd-fabric.log
	for _ in $(seq 50); do [[ -s /run/radvd-fabric.pid ]] && return 0; sleep 0.1; done
	echo "fabric: radvd did not start: $(cat /run/radvd-fabric.log 2>/dev/null)" >&2
	return 1
}

fabric_pod_network() { # fabric_pod_network NETNS
	local ns=$1 n k veth
	n=$(fabric_host_number "$FABRIC_HOST")
	k=$(($(cat /run/fabric-podnet 2>/dev/null || echo 1) + 1))
	echo "$k" >/run/fabric-podnet
	veth=podnet$k
	ip link add "$veth" type veth peer name eth0 netns "$ns"
	ip link set "$veth" up
	ip addr add "10.244.$n.1/32" dev "$veth"
	ip route add "10.244.$n.$k/32" dev "$veth"
	ip -n "$ns" addr add "10.244.$n.$k/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route add default via "10.244.$n.1" dev eth0
	echo "10.244.$n.$k"
}
