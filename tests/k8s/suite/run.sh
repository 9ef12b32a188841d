#!/usr/bin/env bash
# The Kubernetes suite (on the node; tests/k8s/run.sh boots it):
#   tests/k8s/run.sh tests/k8s/suite/run.sh [PATTERN...]
# runs every test_* function of the NN-*.sh files here whose name matches an ERE PATTERN (all
# without one), in file and definition order, one cluster for all. Each test is a user's
# action with kubectl and a check of what it left on the node. test_ofed_* run only on
# VM_RDMA=ofed, test_upstream_* only without it, test_traffic_* only on VM_KERNEL=backports.
# Prints one line per test and ends with "k8s: N passed, M failed"; exits non-zero when a test
# failed or none ran.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/k8s/suite/lib.sh
source "$here/lib.sh"

passed=0 failed=0 failures=()
for file in "$here"/[0-9]*.sh; do
	mapfile -t tests < <(grep -oE '^test_[a-z0-9_]+' "$file")
	for t in "${tests[@]}"; do
		if (($# > 0)); then
			match=0
			for p in "$@"; do [[ $t =~ $p ]] && match=1; done
			((match)) || continue
		fi
		case $t in
		test_ofed_*) [[ ${VM_RDMA:-upstream} == ofed ]] || continue ;;
		test_upstream_*) [[ ${VM_RDMA:-upstream} == upstream ]] || continue ;;
		test_traffic_*) [[ $(uname -r) == 7.* ]] || continue ;;
		esac
		log=$(mktemp)
		start=$SECONDS
		set +e
		(
			set -euo pipefail
			shopt -s inherit_errexit
			# shellcheck source=/dev/null # each suite file is linted on its own (make lint)
			source "$file"
			trap cleanup_k8s EXIT
			"$t"
		) >"$log" 2>&1
		rc=$?
		set -e
		if ((rc == 0)); then
			passed=$((passed + 1))
			printf 'ok    %-55s %4ss\n' "$t" $((SECONDS - start))
			[[ -n ${VM_VERBOSE:-} ]] && sed 's/^/      /' "$log"
		else
			failed=$((failed + 1))
			failures+=("$t")
			printf 'FAIL  %-55s %4ss\n' "$t" $((SECONDS - start))
			tail -n 30 "$log" | sed 's/^/      /'
		fi
		rm -f "$log"
	done
done
((failed == 0)) || printf 'failed: %s\n' "${failures[*]}"
echo "k8s: $passed passed, $failed failed"
((passed > 0 && failed == 0))
