#!/usr/bin/env bash
# Two hosts on one RoCE fabric: boot hosts a and b (the VM of tests/vm, each with its own
# kernel and Soft-RoCE rails rdma0..rdma3 on their rail NICs), wire them rail by rail, and run
# SCRIPT on a as root. SCRIPT's exit status is this command's.
#
#   tests/fabric/run.sh SCRIPT [ARGS...]
#
# SCRIPT may source "$FABRIC_LIB" (tests/fabric/lib.sh): `on HOST CMD...` runs CMD on host b or
# the rail router r (or a) and returns its exit status, fabric_addr HOST RAIL prints a host's
# address on a rail, and more (its header). The contract: docs/testing.md, "Two hosts".
#
# Environment:
#   FABRIC_LAYOUT    flat (default; A100): rail i of a and rail i of b on one L2 segment of their
#                    own, every rail in 172.16.0.0/16. routed6 (B300): rail i of each host on
#                    a segment of its own to the rail router r, a third small VM that sends
#                    router advertisements with a /64 per host per rail (2001:db8:a:i::/64 for
#                    a, 2001:db8:b:i::/64 for b) and routes between them
#   VM_KERNEL        backports (default here: Soft-RoCE carries traffic for an address in a
#                    pod's namespace only on 7.x) or default (6.1, which cannot)
#   VM_RDMA          upstream (default) or ofed, as tests/vm/run.sh; either way the hosts run
#                    the rdma_rxe of tests/vm/ofed/rxe-nic-receive.patch, which receives RoCE
#                    for a pod's GID on the rail's device as a NIC port does
#   FABRIC_TIMEOUT   seconds before the hosts are stopped (default 1800)
#   FABRIC_SMP       CPUs per host (default 1). With 2, the 7.x kernel under multi-threaded TCG
#                    oopses now and then on an int3 left behind by its own code patching
#                    (text_poke: "Oops: int3" at a function's first bytes, e.g.
#                    inet_init_ehash_secret in ib_write_bw, sched_clock_idle_wakeup_event in
#                    early boot), far more often with three VMs on two host cores
#   FABRIC_SMP_A     CPUs of host a alone (default FABRIC_SMP): tests/k8s/run.sh gives the
#                    control plane on a two (K8S_NODES=2), as its one-node VM has
#   ROCE_IPVLAN_BIN, VM_MEM, VM_VERBOSE: as tests/vm/run.sh (all hosts)
#
# The wires are QEMU UDP socket netdevs between ports on 127.0.0.1, one per link: no bridge,
# no tap, nothing sent to any other address. Besides the rails, a and b share one more link,
# eth0, the cluster network (10.88.0.0/24; pods on it: fabric_pod_network). `on` passes commands
# through a folder all VMs mount (/run/fabric), not through a network.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
(($# > 0)) || { echo "usage: $0 SCRIPT [ARGS...]" >&2; exit 2; }
script=$1
shift
[[ -f $script ]] || { echo "fabric: SCRIPT $script not found" >&2; exit 2; }
script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")

layout=${FABRIC_LAYOUT:-flat}
case $layout in flat | routed6) ;; *) echo "fabric: FABRIC_LAYOUT must be flat or routed6, not '$layout'" >&2; exit 2 ;; esac
export VM_KERNEL=${VM_KERNEL:-backports}
export VM_RDMA=${VM_RDMA:-upstream} VM_RXE=nic
timeout=${FABRIC_TIMEOUT:-1800}
rails=(rdma0 rdma1 rdma2 rdma3)

# Build what the VMs share once, before they start (three run.sh building one cache at once
# would race): the kernel, its module tree with the NIC-like rxe, the libcni driver.
kdir=$("$repo/tests/vm/kernel.sh")
if [[ $VM_RDMA == ofed ]]; then
	mroot=$("$repo/tests/vm/ofed/build.sh" --rxe-nic "$kdir")
else
	mroot=$("$repo/tests/vm/ofed/build.sh" --upstream-core "$kdir")
fi
grep -qx 'rxe-nic-receive.patch: yes' "$mroot/done" ||
	{ echo "fabric: $(cat "$kdir/version")'s rdma_rxe was built without rxe-nic-receive.patch (a 7.x kernel is needed: VM_KERNEL=backports)" >&2; exit 2; }
"$repo/tests/cnidriver/build.sh" >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/roce-fabric.XXXXXX")
share=$work/share
mkdir -p "$share/req/a" "$share/req/b" "$share/addr"
[[ $layout == flat ]] || mkdir -p "$share/req/r"
# The VM mounts fresh tmpfs on /tmp, /var/tmp and /run: SCRIPT's folder below one of them is
# bound back (tests/vm/run.sh); a SCRIPT right in one of them runs from a copy in /run/fabric.
case $(dirname "$script") in
/tmp | /var/tmp | /run) cp "$script" "$share/script"; script=/run/fabric/script ;;
*) VM_KEEP_PATHS="${VM_KEEP_PATHS:-} $(dirname "$script")" && export VM_KEEP_PATHS ;;
esac
chmod 755 "$work"
pids=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local p
	touch "$share/stop"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# One UDP port per end of each link (free_ports: below the ephemeral range, free when picked).
# shellcheck source=tests/free-ports.sh
source "$repo/tests/free-ports.sh"
link() { # link PORT_HERE PORT_THERE: the -netdev backend of one end
	echo "socket,localaddr=127.0.0.1:$1,udp=127.0.0.1:$2"
}

declare -A netdevs
n=${#rails[@]}
# Ports: the cluster network's two ends, then the rails' (2 a rail on flat, 4 on routed6).
per_rail=2
[[ $layout == flat ]] || per_rail=4
want=$((2 + per_rail * n))
read -r -a ports <<<"$(free_ports "$want")"
((${#ports[@]} == want)) ||
	{ echo "fabric: found ${#ports[@]} free UDP ports on 127.0.0.1 below the ephemeral range, needed $want" >&2; exit 1; }
# The cluster network: eth0 of a and b on a link of its own (pods' out-of-band traffic, as
# NCCL's bootstrap and the perftests' exchange take the pod network on a cluster).
cluster_a=$(link "${ports[0]}" "${ports[1]}") cluster_b=$(link "${ports[1]}" "${ports[0]}")
ports=("${ports[@]:2}")
if [[ $layout == flat ]]; then
	for ((i = 0; i < n; i++)); do
		pa=${ports[2 * i]} pb=${ports[2 * i + 1]}
		netdevs[a]+="$(link "$pa" "$pb") "
		netdevs[b]+="$(link "$pb" "$pa") "
	done
	hosts=(b)
else
	# r's NICs: ra0..ra3 (to a's rails), then rb0..rb3 (to b's).
	ra="" rb=""
	for ((i = 0; i < n; i++)); do
		pa=${ports[4 * i]} pra=${ports[4 * i + 1]} pb=${ports[4 * i + 2]} prb=${ports[4 * i + 3]}
		netdevs[a]+="$(link "$pa" "$pra") "
		ra+="$(link "$pra" "$pa") "
		netdevs[b]+="$(link "$pb" "$prb") "
		rb+="$(link "$prb" "$pb") "
	done
	netdevs[r]="$ra$rb"
	hosts=(r b)
fi
netdevs[a]+=$cluster_a
netdevs[b]+=$cluster_b

# boot HOST MAC_BASE RAILS BARE CMD...: one VM of the fabric, its console output in HOST.log
boot() {
	local host=$1 mac=$2 vrails=$3 vbare=$4 smp=${FABRIC_SMP:-1}
	shift 4
	[[ $host == a ]] && smp=${FABRIC_SMP_A:-$smp}
	VM_NAME=$host VM_MAC_BASE=$mac VM_SMP=$smp VM_RAILS=$vrails VM_BARE_NICS=$vbare VM_PEERS=0 \
		VM_NETDEVS=${netdevs[$host]} VM_FABRIC_SHARE=$share \
		VM_TIMEOUT=$((timeout + 120)) "$repo/tests/vm/run.sh" "$@"
}

start=$SECONDS
for h in "${hosts[@]}"; do
	# gone-HOST, with run.sh's exit code, once the host's VM has ended: `on` and host-a.sh stop
	# waiting for it.
	if [[ $h == r ]]; then
		# The router: no RDMA, 8 NICs, little memory.
		(
			VM_MEM=${FABRIC_ROUTER_MEM:-512} boot r 52:54:00:2a:00 "" "ra0 ra1 ra2 ra3 rb0 rb1 rb2 rb3" \
				bash "$here/agent.sh" r "$layout" >"$work/r.log" 2>&1
			echo $? >"$share/gone-r"
		) &
	else
		(
			boot b 52:54:00:1a:00 "${rails[*]}" eth0 bash "$here/agent.sh" b "$layout" >"$work/b.log" 2>&1
			echo $? >"$share/gone-b"
		) &
	fi
	pids+=($!)
done

set +e
boot a 52:54:00:0a:00 "${rails[*]}" eth0 bash "$here/host-a.sh" "$layout" "$script" "$@"
rc=$?
set -e
touch "$share/stop"

# The other hosts power off on "stop"; give them a moment, then show what they said when a
# failed (or when they did not end by themselves).
for i in "${!pids[@]}"; do
	for _ in $(seq 60); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 1; done
	h=${hosts[i]}
	if kill -0 "${pids[i]}" 2>/dev/null || ((rc != 0)) || [[ -n ${VM_VERBOSE:-} ]]; then
		echo "--- host $h ---" >&2
		tail -n 60 "$work/$h.log" >&2
	fi
done
echo "fabric: $layout, hosts ${hosts[*]} and a, $((SECONDS - start)) s, exit code $rc" >&2
exit "$rc"
