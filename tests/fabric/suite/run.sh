#!/usr/bin/env bash
# The fabric suite, on host a of tests/fabric/run.sh (make fabric-test runs it on both layouts):
#   tests/fabric/run.sh tests/fabric/suite/run.sh [PATTERN...]
# Runs the test_* functions of tests/fabric/suite/[0-9]*.sh whose name matches a PATTERN (all
# without one), each test of one layout only on that layout (test_flat_*, test_routed6_*;
# test_fabric_* on both), and those of the OFED view (test_*_ofed_*) only with VM_RDMA=ofed.
# Ends with "fabric: N passed, M failed"; exits non-zero when a test failed or none ran.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
source "$FABRIC_LIB"
# shellcheck source=../../vm/suite/lib.sh
source "$here/../../vm/suite/lib.sh"
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=../../suite-runner.sh
source "$here/../../suite-runner.sh"

skip_test() {
	local t=$1
	[[ $t == test_flat_* && $FABRIC_LAYOUT != flat ]] && { echo "FABRIC_LAYOUT=flat's"; return 0; }
	[[ $t == test_routed6_* && $FABRIC_LAYOUT != routed6 ]] && { echo "FABRIC_LAYOUT=routed6's"; return 0; }
	[[ $t == test_*_ofed_* && ${VM_RDMA:-upstream} != ofed ]] && { echo "needs VM_RDMA=ofed"; return 0; }
	return 1
}

run_suite "fabric ($FABRIC_LAYOUT, VM_RDMA=${VM_RDMA:-upstream})" "$here" fabric_cleanup "$@"
