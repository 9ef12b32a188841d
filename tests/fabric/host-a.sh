#!/usr/bin/env bash
# Host a of the fabric (tests/fabric/run.sh boots it with tests/vm/run.sh): set it up, wait
# until the other hosts are ready, then run SCRIPT as root with FABRIC_LIB exported.
#
#   tests/fabric/host-a.sh LAYOUT SCRIPT [ARGS...]
set -euo pipefail
export FABRIC_LAYOUT=$1
script=$2
shift 2
# shellcheck source=../vm/lib.sh
source "$ROCE_REPO/tests/vm/lib.sh"
# shellcheck source=lib.sh
source "$ROCE_REPO/tests/fabric/lib.sh"
mkdir -p "$FABRIC_SHARE/req/a"
fabric_host_setup

others=(b)
[[ $FABRIC_LAYOUT == routed6 ]] && others=(r b)
for h in "${others[@]}"; do
	fabric_wait_ready "$h" 600 || exit 1
done
echo "fabric: hosts a ${others[*]} ready after $SECONDS s ($FABRIC_LAYOUT)"
exec bash "$script" "$@"
