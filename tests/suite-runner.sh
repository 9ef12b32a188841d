#!/usr/bin/env bash
# The loop both test suites share (tests/vm/suite/run.sh in the VM, tests/k8s/suite/run.sh on
# the Kubernetes node); sourced, not run.
#
#   run_suite LABEL DIR CLEANUP [PATTERN...]
# runs every test_* function of DIR/[0-9]*.sh, in file and definition order (cheap checks
# first), whose name matches an ERE PATTERN (all without one) and that the caller's
# `skip_test NAME [PATTERN...]` does not skip (status 0 skips). Each test runs in a subshell
# with its file sourced, errexit on, and CLEANUP as its EXIT trap. Prints one line per test
# (its output with VM_VERBOSE=1, the tail of it when it failed) and ends with "LABEL: N passed,
# M failed". Returns non-zero when a test failed or none ran.
run_suite() {
	local label=$1 dir=$2 cleanup=$3
	shift 3
	local passed=0 failed=0 failures=() file t p match log start rc tests
	for file in "$dir"/[0-9]*.sh; do
		mapfile -t tests < <(grep -oE '^test_[a-z0-9_]+' "$file")
		for t in "${tests[@]}"; do
			if (($# > 0)); then
				match=0
				for p in "$@"; do [[ $t =~ $p ]] && match=1; done
				((match)) || continue
			fi
			skip_test "$t" "$@" && continue
			log=$(mktemp)
			start=$SECONDS
			set +e
			(
				set -euo pipefail
				shopt -s inherit_errexit
				# shellcheck source=/dev/null # each suite file is linted on its own (make lint)
				source "$file"
				# shellcheck disable=SC2064 # the cleanup function named now
				trap "$cleanup" EXIT
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
	echo "$label: $passed passed, $failed failed"
	((passed > 0 && failed == 0))
}
