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

passed=0 failed=0 failures=()
for file in "$here"/[0-9]*.sh; do
	# Definition order inside a file is the run order (cheap checks first).
	mapfile -t tests < <(grep -oE '^test_[a-z0-9_]+' "$file")
	for t in "${tests[@]}"; do
		if (($# > 0)); then
			match=0
			for p in "$@"; do [[ $t =~ $p ]] && match=1; done
			((match)) || continue
			if [[ $t == test_traffic_ofed_* && ${VM_RDMA:-upstream} != ofed && $* != *ofed* ]]; then
				continue # OFED view only: 'make vm-traffic-ofed'
			fi
		elif [[ $t == test_traffic_* ]]; then
			continue # needs the backports kernel: 'make vm-traffic' (90-traffic.sh)
		elif [[ $t == test_ofed_* && ${VM_RDMA:-upstream} != ofed ]] ||
			[[ $t == test_upstream_* && ${VM_RDMA:-upstream} != upstream ]]; then
			continue # the other RDMA view's (12-ofed.sh)
		fi
		log=$(mktemp)
		start=$SECONDS
		set +e
		(
			set -euo pipefail
			shopt -s inherit_errexit
			# shellcheck source=/dev/null # each suite file is linted on its own (make lint)
			source "$file"
			trap cleanup_pods EXIT
			"$t"
		) >"$log" 2>&1
		rc=$?
		set -e
		if ((rc == 0)); then
			passed=$((passed + 1))
			printf 'ok    %-50s %3ss\n' "$t" $((SECONDS - start))
			[[ -n ${VM_VERBOSE:-} ]] && sed 's/^/      /' "$log"
		else
			failed=$((failed + 1))
			failures+=("$t")
			printf 'FAIL  %-50s %3ss\n' "$t" $((SECONDS - start))
			tail -n 25 "$log" | sed 's/^/      /'
		fi
		rm -f "$log"
	done
done

((failed == 0)) || printf 'failed: %s\n' "${failures[*]}"
echo "vm: $passed passed, $failed failed"
((failed == 0 && passed > 0))
