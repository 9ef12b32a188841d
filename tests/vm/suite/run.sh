#!/usr/bin/env bash
# Run the VM test suite (inside the VM; tests/vm/run.sh boots it):
#   tests/vm/suite/run.sh [PATTERN...]   run tests whose name matches any ERE PATTERN
# Without a PATTERN, all but test_traffic_* (they need VM_KERNEL=backports: make vm-traffic), and
# of 12-ofed.sh only the tests of the RDMA view the VM booted: test_ofed_* with VM_RDMA=ofed,
# test_upstream_* without (make vm-ofed; each fails on the other view). test_traffic_ofed_*
# (91-traffic-ofed.sh) run only with VM_RDMA=ofed (make vm-traffic-ofed), even when a pattern
# selects them, unless a pattern names "ofed" (to see them fail on the upstream view).
# Prints one line per test and ends with "vm: N passed, M failed". Exits non-zero when a test
# failed or when nothing ran.
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
	if (($# > 0)); then
		# OFED view only ('make vm-traffic-ofed'), unless a pattern names "ofed".
		[[ $t == test_traffic_ofed_* && ${VM_RDMA:-upstream} != ofed && $* != *ofed* ]]
		return
	fi
	# test_traffic_* need the backports kernel ('make vm-traffic', 90-traffic.sh); test_ofed_*
	# and test_upstream_* are the other RDMA view's (12-ofed.sh).
	[[ $t == test_traffic_* ]] ||
		[[ $t == test_ofed_* && ${VM_RDMA:-upstream} != ofed ]] ||
		[[ $t == test_upstream_* && ${VM_RDMA:-upstream} != upstream ]]
}

run_suite vm "$here" cleanup_pods "$@"
