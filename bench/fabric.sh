#!/usr/bin/env bash
# The fabric section of make bench (bench/run.sh; alone: make bench-fabric): RDMA bandwidth
# between hosts a and b of tests/fabric (flat layout) over rail rdma0, once from a pod's IPvlan
# child (the GID index ADD wrote into its ifalias) and once from the host's own rail netdev (the
# host's RoCE v2 GID for its rail address, as a hostNetwork pod would use it), in one boot, the
# rounds interleaved (ABBA) so that both sides see the same machine. The field report found
# IPvlan children matching hostNetwork on ConnectX; this asks the same question of the wire
# here. Runs on host a (tests/fabric/run.sh bench/fabric.sh [ROUNDS [SIZE [ITERS]]]) and
# prints one line "@@FABRIC-BENCH-JSON {...}" for bench/fabric_report.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=../tests/fabric/lib.sh
source "$FABRIC_LIB"
# shellcheck source=../tests/vm/suite/lib.sh
source "$repo/tests/vm/suite/lib.sh"
# shellcheck source=../tests/fabric/suite/lib.sh
source "$repo/tests/fabric/suite/lib.sh"
trap fabric_cleanup EXIT

rounds=${1:-5} size=${2:-65536} iters=${3:-1000}
[[ $FABRIC_LAYOUT == flat ]] || fail "the fabric bench runs on the flat layout (FABRIC_LAYOUT=flat), not $FABRIC_LAYOUT"
port=18600

# host_gid_index HOST: the index of HOST's RoCE v2 GID for its rail-0 address on rxe0, looked up
# by value (a GID's index is the first free slot when it was added).
host_gid_index() {
	local want
	want=$(gid_of_ipv4 "$(fabric_addr "$1" 0)")
	# shellcheck disable=SC2016 # expanded on the host
	on "$1" bash -c 'for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
		i=${f##*/}
		[[ $(cat "$f") == "$0" ]] || continue
		[[ $(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i" 2>/dev/null) == "RoCE v2" ]] || continue
		[[ $(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/$i" 2>/dev/null) == rdma0 ]] || continue
		echo "$i"; exit 0
	done; exit 1' "$want"
}

# bw SIDE: one ib_write_bw (RC, -s size, -n iters) from a to b over rail 0, from the pods'
# children (pod) or the hosts' rail netdevs (host); prints the average MB/s. The QP exchange
# goes over the cluster network either way (pod B's eth0, or host b's).
bw() {
	local side=$1 srv rc=0 line
	local -a cmd_b=(ib_write_bw -d rxe0 -s "$size" -n "$iters" -F -p "$port") cmd_a
	cmd_a=("${cmd_b[@]}")
	if [[ $side == pod ]]; then
		on b ip netns exec podB timeout 180 "${cmd_b[@]}" -x "$IDX_POD_B" >/tmp/fbench-srv.log 2>&1 &
		srv=$!
		sleep 3
		in_pod podA timeout 180 "${cmd_a[@]}" -x "$IDX_POD_A" "$POD_NET_B" >/tmp/fbench-cli.log 2>&1 || rc=$?
	else
		on b timeout 180 "${cmd_b[@]}" -x "$IDX_HOST_B" >/tmp/fbench-srv.log 2>&1 &
		srv=$!
		sleep 3
		timeout 180 "${cmd_a[@]}" -x "$IDX_HOST_A" 10.88.0.2 >/tmp/fbench-cli.log 2>&1 || rc=$?
	fi
	((rc == 0)) || fail "$side ib_write_bw client exited $rc: $(tail -n 6 /tmp/fbench-cli.log | tr '\n' ' ')"
	wait "$srv" || fail "$side ib_write_bw server on host b failed: $(tail -n 6 /tmp/fbench-srv.log | tr '\n' ' ')"
	# perftest's result line: #bytes #iterations BW-peak BW-average MsgRate (MB/sec).
	line=$(grep -E "^ *$size +$iters " /tmp/fbench-cli.log) || fail "no result line from the $side ib_write_bw: $(cat /tmp/fbench-cli.log)"
	awk '{print $4}' <<<"$line"
}

# POD_NET_A unused: the pods' addresses on the cluster network, set by fabric_pods.
# shellcheck disable=SC2034
POD_NET_A="" POD_NET_B=""
fabric_pods
alias_a=$(child_alias a net1r0) alias_b=$(child_alias b net1r0)
assert_eq "$(alias_field "$alias_a" rdma_dev)/$(alias_field "$alias_b" rdma_dev)" rxe0/rxe0 "rail 0's RDMA device in the pods' ifaliases"
IDX_POD_A=$(alias_field "$alias_a" gid_index) IDX_POD_B=$(alias_field "$alias_b" gid_index)
IDX_HOST_A=$(host_gid_index a) || fail "host a has no RoCE v2 GID for $(fabric_addr a 0) on rxe0"
IDX_HOST_B=$(host_gid_index b) || fail "host b has no RoCE v2 GID for $(fabric_addr b 0) on rxe0"
echo "pods: GID $IDX_POD_A -> $IDX_POD_B; hosts: GID $IDX_HOST_A -> $IDX_HOST_B; $rounds rounds of $iters x $size bytes"

pod=() host=()
read -r -a tx0 <<<"$(rail_bytes a tx)"
for ((r = 0; r < rounds; r++)); do
	# ABBA: the pod first in even rounds, the host first in odd ones.
	order=(pod host)
	((r % 2 == 0)) || order=(host pod)
	for side in "${order[@]}"; do
		mbps=$(bw "$side")
		if [[ $side == pod ]]; then pod+=("$mbps"); else host+=("$mbps"); fi
	done
	echo "round $r: pod ${pod[-1]} MB/s, host ${host[-1]} MB/s"
done
read -r -a tx1 <<<"$(rail_bytes a tx)"
# Both sides' data left host a by rail 0, and only by it: 2 x rounds x the data of one run.
want=$((2 * rounds * size * iters))
for i in 0 1 2 3; do
	d=$((tx1[i] - tx0[i]))
	if ((i == 0)); then
		((d >= want)) || fail "rail 0 of host a sent $d bytes, less than the $want the runs moved"
	else
		((d < want / 100)) || fail "rail $i of host a sent $d bytes during the runs on rail 0"
	fi
done

jq -cn --arg kernel "$(uname -r)" --argjson rounds "$rounds" --argjson size "$size" --argjson iters "$iters" \
	--arg pod "${pod[*]}" --arg host "${host[*]}" --argjson rail0 "$((tx1[0] - tx0[0]))" \
	'{kernel: $kernel, layout: "flat", rail: "rdma0", tool: "ib_write_bw RC", rounds: $rounds,
	  size: $size, iters: $iters, rail0_tx_bytes: $rail0,
	  pod_mbps: ($pod | split(" ") | map(tonumber)), host_mbps: ($host | split(" ") | map(tonumber))}' |
	sed 's/^/@@FABRIC-BENCH-JSON /'
