#!/usr/bin/env bash
# The VM suite in several VMs at once, one shard of its files each (make vm-test):
#
#   tests/vm/shards.sh [SHARD_ERE...]   (default: VM_SHARDS, else '^([01]|2[0-6])' '^(2[7-9]|[3-9])')
#
# Each SHARD_ERE selects the suite files whose name matches it (SUITE_FILES of
# tests/suite-runner.sh); the shards together must cover every file once, which is checked
# before anything boots. A TCG guest running one test at a time keeps about one host thread
# busy, so on two cores two VMs take little more than the longer shard. Every line of a shard's
# output is prefixed with its name (vm1, vm2, ...). The other variables are tests/vm/run.sh's.
# SUITE_EXPECT is held to the sum: fails when a shard fails, or when fewer tests ran than
# SUITE_EXPECT in all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if (($# == 0)); then
	read -r -a shards <<<"${VM_SHARDS:-^([01]|2[0-6]) ^(2[7-9]|[3-9])}"
	set -- "${shards[@]}"
fi

# Every suite file in exactly one shard: a file no shard names would silently not run.
for file in "$here"/suite/[0-9]*.sh; do
	name=${file##*/} n=0
	for re in "$@"; do [[ $name =~ $re ]] && n=$((n + 1)); done
	((n == 1)) || { echo "shards.sh: $name is in $n shards of '$*', it must be in exactly one" >&2; exit 2; }
done

# What the VMs share is made once, before they start (each would build it otherwise).
"$here/kernel.sh" >/dev/null
"$repo/tests/cnidriver/build.sh" >/dev/null

logs=$(mktemp -d "${TMPDIR:-/tmp}/roce-vm-shards.XXXXXX")
trap 'rm -rf "$logs"' EXIT
pids=()
i=0
for re in "$@"; do
	i=$((i + 1))
	(
		set +e
		env -u SUITE_EXPECT SUITE_FILES="$re" VM_NAME="vm$i" \
			"$here/run.sh" "$here/suite/run.sh" 2>&1 | tee "$logs/$i" | sed -u "s/^/vm$i  /"
		echo "${PIPESTATUS[0]}" >"$logs/$i.rc"
	) &
	pids+=($!)
done
wait "${pids[@]}"

ran=0 bad=0
for ((j = 1; j <= i; j++)); do
	rc=$(cat "$logs/$j.rc" 2>/dev/null || echo none)
	summary=$(tr -d '\r' <"$logs/$j" | grep -E '^vm: [0-9]+ passed, [0-9]+ failed' | tail -n 1 || true)
	if [[ $summary =~ ^vm:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
		ran=$((ran + BASH_REMATCH[1] + BASH_REMATCH[2]))
	fi
	echo "vm$j (files '${!j}'): ${summary:-no summary}, exit $rc"
	[[ $rc == 0 ]] || bad=1
done
echo "vm: $ran tests ran in $i shards"
if [[ -n ${SUITE_EXPECT:-} ]] && ((ran < SUITE_EXPECT)); then
	echo "vm: only $ran tests ran, $SUITE_EXPECT expected (SUITE_EXPECT): see the SKIP lines" >&2
	exit 1
fi
exit "$bad"
