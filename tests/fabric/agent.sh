#!/usr/bin/env bash
# Host b or the rail router r of the fabric (tests/fabric/run.sh boots it with tests/vm/run.sh):
# set the host up, say it is ready, then run the requests `on HOST ...` leaves in
# /run/fabric/req/HOST/ (each in its own process, so several may run at once) until the fabric
# says stop.
#
#   tests/fabric/agent.sh HOST LAYOUT
set -uo pipefail
export FABRIC_LAYOUT=$2
# shellcheck source=../vm/lib.sh
source "$ROCE_REPO/tests/vm/lib.sh"
# shellcheck source=lib.sh
source "$ROCE_REPO/tests/fabric/lib.sh"
host=$1
[[ $host == "$FABRIC_HOST" ]] || { echo "agent: VM_NAME is '$FABRIC_HOST', not $host" >&2; exit 2; }
dir=$FABRIC_SHARE/req/$host
mkdir -p "$dir"

if [[ $host == r ]]; then
	fabric_router_setup || exit 1
else
	fabric_host_setup || exit 1
fi
echo "agent: host $host ready after $SECONDS s"
touch "$FABRIC_SHARE/ready-$host"

while [[ ! -e $FABRIC_SHARE/stop ]]; do
	for req in "$dir"/*.cmd; do
		[[ -e $req ]] || continue
		id=$(basename "$req" .cmd)
		mv "$req" "$dir/$id.run" 2>/dev/null || continue
		(
			(
				set +eu
				cd "$ROCE_REPO" || exit 1
				# shellcheck source=/dev/null # the request: one quoted command line
				source "$dir/$id.run"
			) </dev/null >"$dir/$id.out" 2>"$dir/$id.err"
			echo $? >"$dir/.$id.rc"
			mv "$dir/.$id.rc" "$dir/$id.rc"
		) &
	done
	nap 0.05
done
echo "agent: host $host stopping"
