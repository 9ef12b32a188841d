#!/usr/bin/env bash
# The privileged Rust tier (docs/testing.md, "Privileged Rust tests"): the #[ignore]d tests that
# need root, namespaces and the VM's Soft-RoCE rails, built on the host and run in the VM.
#
#   tests/vm/rust.sh             build the test binaries with --features failpoints (own target
#                                dir, target/failpoints), boot the VM once, run them there
#   tests/vm/rust.sh --in-vm N:BIN...   (inside the VM) run each BIN with --ignored; it must
#                                pass exactly the N tests it listed on the host
#
# Held to a count like the shell suites: each binary must pass every ignored test it lists (a
# test filtered out, skipped or panicking in the harness is not a pass), and when SUITE_EXPECT is
# set (make test sets it) the binaries must list at least that many, so a test that stops being
# compiled in (a cfg, a feature) does not shrink the tier silently.
#
# The VM sees the host's root read-only, so it runs the binaries where cargo put them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ ${1:-} == --in-vm ]]; then
	shift
	(($# > 0)) || { echo "rust.sh: no test binary given" >&2; exit 2; }
	rc=0 total=0 want_total=0
	for arg in "$@"; do
		want=${arg%%:*} bin=${arg#*:}
		[[ $want =~ ^[0-9]+$ && -n $bin ]] || { echo "rust.sh: expected N:BIN, got '$arg'" >&2; exit 2; }
		echo "== $(basename "$bin") --ignored ($want listed)"
		log=$(mktemp)
		# One test at a time: the rollback tests compare the host's links, rules and GIDs
		# before and after each ADD.
		"$bin" --ignored --test-threads=1 2>&1 | tee "$log" || rc=1
		n=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed;.*/\1/p' "$log" | tail -n1)
		rm -f "$log"
		# A binary whose filter ran nothing has tested nothing; one that passed fewer than it
		# listed did not run them all.
		[[ ${n:-0} -gt 0 ]] || { echo "rust.sh: $(basename "$bin") ran no test" >&2; rc=1; }
		[[ ${n:-0} == "$want" ]] || { echo "rust.sh: $(basename "$bin") passed ${n:-0} of its $want ignored tests" >&2; rc=1; }
		total=$((total + ${n:-0})) want_total=$((want_total + want))
	done
	echo "vm-rust: $total of $want_total privileged tests passed, exit $rc"
	exit "$rc"
fi

cd "$repo"
# The library's unit tests (netlink, netns, rdma::nldev) and tests/privileged.rs (ADD's
# rollback), with the failpoints compiled in; in a target dir of their own so that
# target/debug/roce-ipvlan, which the other VM tests run, stays the build without them.
mapfile -t bins < <(
	"${CARGO:-cargo}" test --locked --no-run -p roce-ipvlan --features failpoints \
		--target-dir target/failpoints --lib --test privileged --message-format=json |
		jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test) | .executable'
)
((${#bins[@]} == 2)) || { echo "rust.sh: expected 2 test binaries, got: ${bins[*]}" >&2; exit 1; }
# What each binary will run in the VM: its ignored tests, listed here (listing runs nothing).
args=() listed=0
for bin in "${bins[@]}"; do
	list=$("$bin" --ignored --list --format terse) || { echo "rust.sh: $bin --ignored --list failed" >&2; exit 1; }
	n=$(grep -c ': test$' <<<"$list") || n=0
	args+=("$n:$bin") listed=$((listed + n))
done
echo "vm-rust: ${args[*]}"
if [[ -n ${SUITE_EXPECT:-} ]] && ((listed < SUITE_EXPECT)); then
	echo "vm-rust: the test binaries list $listed privileged tests, $SUITE_EXPECT expected (SUITE_EXPECT)" >&2
	exit 1
fi
exec "$here/run.sh" "$here/rust.sh" --in-vm "${args[@]}"
