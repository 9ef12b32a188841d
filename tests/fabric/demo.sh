#!/usr/bin/env bash
# make demo-traffic: on the fabric of tests/fabric/run.sh (hosts a and b, flat layout by
# default), roce-ipvlan attaches a pod on each host to every rail with one attachment, and
# ib_write_bw moves RoCE v2 data from pod A to pod B over rail rdma0 with the GID index each
# pod's ifalias names; the rail's NIC counters on both hosts show it crossed the wire.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
source "$FABRIC_LIB"
# shellcheck source=../vm/suite/lib.sh
source "$here/../vm/suite/lib.sh"
# shellcheck source=suite/lib.sh
source "$here/suite/lib.sh"
trap fabric_cleanup EXIT

heading() { printf '\n== %s ==\n' "$*"; }
heading "hosts a and b: kernel $(uname -r), layout $FABRIC_LAYOUT, rails $FABRIC_RAILS"
# shellcheck disable=SC2034 # set by new_pods (POD_NET_A unused here)
POD_NET_A="" POD_NET_B=""
fabric_pods
for h in a b; do
	echo "pod ${h^^} on host $h:"
	# shellcheck disable=SC2016 # expanded in the pod
	on "$h" ip netns exec "pod${h^^}" bash -c 'for i in /sys/class/net/net1r*; do echo "  ${i##*/}: $(cat "$i/ifalias")"; done'
done

alias_a=$(child_alias a net1r0) alias_b=$(child_alias b net1r0)
idx_a=$(alias_field "$alias_a" gid_index) idx_b=$(alias_field "$alias_b" gid_index)
heading "ib_write_bw pod A -> pod B on rxe0, GID index $idx_a -> $idx_b (from the ifaliases)"
read -r -a a0 <<<"$(rail_bytes a tx)"
on b ip netns exec podB timeout 60 ib_write_bw -d rxe0 -x "$idx_b" -s 65536 -n 100 -F >/tmp/demo-srv.log 2>&1 &
server=$!
sleep 3
ip netns exec podA timeout 60 ib_write_bw -d rxe0 -x "$idx_a" -s 65536 -n 100 -F "$POD_NET_B" | grep -E '^ *#bytes|^ *65536 '
wait "$server"
read -r -a a1 <<<"$(rail_bytes a tx)"
heading "bytes host a's rails sent meanwhile"
for i in 0 1 2 3; do echo "  rdma$i: +$((a1[i] - a0[i]))"; done
