#!/usr/bin/env bash
# Run the VM test suite (inside the VM; tests/vm/run.sh boots it):
#   tests/vm/suite/run.sh [PATTERN...]   run tests whose name matches any ERE PATTERN
# Without a PATTERN, all but the tests of the other RDMA view in 12-ofed.sh: test_ofed_* run with
# VM_RDMA=ofed, test_upstream_* without (make vm-ofed; each fails on the other view). Traffic
# between hosts is the fabric's (tests/fabric, make fabric-test).
# Prints one line per test (SKIP with its reason) and ends with "vm: N passed, M failed, K
# skipped". Exits non-zero when a test failed, when nothing ran, or when fewer than
# SUITE_EXPECT ran.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"
# shellcheck source=lib.sh
source "$here/lib.sh"

# shellcheck source=../../suite-runner.sh
source "$here/../../suite-runner.sh"

# skip_test NAME [PATTERN...]: the tests this VM cannot run (see the header).
skip_test() {
	local t=$1
	shift
	(($# == 0)) || return 1
	if [[ $t == test_ofed_* && ${VM_RDMA:-upstream} != ofed ]]; then echo "the OFED view's (make vm-ofed)"; return 0; fi
	if [[ $t == test_upstream_* && ${VM_RDMA:-upstream} != upstream ]]; then echo "the upstream view's"; return 0; fi
	return 1
}

run_suite vm "$here" cleanup_pods "$@"
