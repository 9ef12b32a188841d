#!/usr/bin/env bash
# On a fabric host: ask who has each ADDR from each of this host's rails (its own address
# there as sender), all at once; prints "N M <replies> <MACs>" per address N and rail M.
#   tests/fabric/suite/arp-probe.sh ADDR...
set -euo pipefail
# shellcheck source=../lib.sh
source "$FABRIC_LIB"
out=$(mktemp -d)
n=0
for addr in "$@"; do
	m=0
	for rail in $FABRIC_RAILS; do
		{
			reply=$(arping -c 1 -w 2 -I "$rail" -s "$(fabric_addr "$FABRIC_HOST" "$m")" "$addr" 2>&1 || true)
			echo "$n $m $(grep -c 'reply from' <<<"$reply" || true) $(grep -oiE '\[[0-9a-f:]+\]' <<<"$reply" | tr 'A-F' 'a-f' | tr -d '[]' | sort -u | tr '\n' ' ')"
		} >"$out/$n-$m" &
		m=$((m + 1))
	done
	n=$((n + 1))
done
wait
cat "$out"/*
rm -rf "$out"
