#!/usr/bin/env bash
# The loop both test suites share (tests/vm/suite/run.sh in the VM, tests/k8s/suite/run.sh on
# the Kubernetes node); sourced, not run.
#
#   run_suite LABEL DIR CLEANUP [PATTERN...]
# runs every test_* function of DIR/[0-9]*.sh, in file and definition order (cheap checks
# first), whose name matches an ERE PATTERN (all without one) and that the caller's
# `skip_test NAME [PATTERN...]` does not skip (status 0 skips; what it prints is the reason).
# Each test runs in a subshell with its file sourced, errexit on, and CLEANUP as its EXIT trap.
# Prints one line per test (SKIP with its reason for a skipped one; its output with
# VM_VERBOSE=1, the tail of it when it failed) and ends with "LABEL: N passed, M failed, K
# skipped". Returns non-zero when a test failed or none ran, and, when SUITE_EXPECT is set (make
# test sets it for each tier), when fewer than SUITE_EXPECT tests ran: a kernel or package
# change that makes tests skip must not shrink a tier silently. SUITE_FILES, an ERE, keeps only
# the files whose name matches it (e.g. '^[3-9]'): a shard of the suite (tests/vm/shards.sh).
run_suite() {
	local label=$1 dir=$2 cleanup=$3
	shift 3
	local passed=0 failed=0 skipped=0 failures=() file t p match log start rc tests why
	for file in "$dir"/[0-9]*.sh; do
		[[ -z ${SUITE_FILES:-} || ${file##*/} =~ $SUITE_FILES ]] || continue
		mapfile -t tests < <(grep -oE '^test_[a-z0-9_]+' "$file")
		for t in "${tests[@]}"; do
			if (($# > 0)); then
				match=0
				for p in "$@"; do [[ $t =~ $p ]] && match=1; done
				((match)) || continue
			fi
			if why=$(skip_test "$t" "$@"); then
				skipped=$((skipped + 1))
				printf 'SKIP  %-55s %s\n' "$t" "${why:-not for this VM}"
				continue
			fi
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
	echo "$label: $passed passed, $failed failed, $skipped skipped"
	if [[ -n ${SUITE_EXPECT:-} ]] && ((passed + failed < SUITE_EXPECT)); then
		echo "$label: only $((passed + failed)) tests ran, $SUITE_EXPECT expected (SUITE_EXPECT): see the SKIP lines"
		return 1
	fi
	((passed > 0 && failed == 0))
}
