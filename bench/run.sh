#!/usr/bin/env bash
# make bench: roce-ipvlan against the ipvlan + tuning + sbr chain, in one VM boot with 16 rails.
# Builds the binary users get (`make static`: the static release build that deploy/Containerfile's
# image ships, target/<arch>-unknown-linux-musl/release/roce-ipvlan, `make static-bin`), boots the VM harness
# (tests/vm/run.sh) with bench/guest.py, keeps the raw numbers in docs/bench/ and regenerates
# docs/benchmarks.md (bench/report.py).
#
#   bench/run.sh                 the 16-rail VM bench, then the fabric and pod-start sections
#   bench/run.sh --fabric-only   the fabric section alone (make bench-fabric): two VMs of
#                                tests/fabric, a pod's child against the host's own rail over
#                                the wire (bench/fabric.sh), spliced into docs/benchmarks.md
#   bench/run.sh --k8s-only      the pod-start section alone (make bench-k8s): on the one-node
#                                cluster of tests/k8s, a pod on 4 rails through the ipvlan +
#                                tuning + sbr chain's 4 NADs against one roce-ipvlan `rails` NAD,
#                                kubectl apply to Ready and to the GID in the pod
#                                (bench/k8s-start.sh), spliced into docs/benchmarks.md
#
# Environment: BENCH_FABRIC=0 leaves the fabric section out; BENCH_FABRIC_ROUNDS (5),
# BENCH_FABRIC_SIZE (65536), BENCH_FABRIC_ITERS (1000) size it. BENCH_K8S=0 leaves the pod-start
# section out; BENCH_K8S_PODS (5 of each kind) and BENCH_K8S_WARMUP (1 of each, not counted)
# size it (12 min for the defaults here, the cluster's 4 min start-up included).
# BENCH_* sizes (see bench/guest.py; defaults are the published ones),
# BENCH_RAILS (16), BENCH_OUT (docs/bench), BENCH_DOC (docs/benchmarks.md), BENCH_BEFORE_REV
# (49f5276: the commit whose `dad: wait` the IPv6 section's "before" row and the phase table's
# "before" column measure; "none" skips them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
out=${BENCH_OUT:-$repo/docs/bench}
doc=${BENCH_DOC:-$repo/docs/benchmarks.md}
nrails=${BENCH_RAILS:-16}
mkdir -p "$out"

fabric_only=0 k8s_only=0
[[ ${1:-} == --fabric-only ]] && fabric_only=1
[[ ${1:-} == --k8s-only ]] && k8s_only=1
start=$(date +%s)
# BENCH_BIN: measure this binary instead of building the tree's (it must live outside /tmp,
# /run and /var/tmp, which are fresh tmpfs inside the VM); BENCH_BIN_NOTE says what it is.
bin=${BENCH_BIN:-}
if [[ -z $bin ]]; then
	# The Makefile's static target checks that the binary has no interpreter; the path is its
	# STATIC_BIN for this host's architecture (the image's default), and the libc it chose
	# (STATIC_LIBC) is kept for the build.
	rel=$(${MAKE:-make} -s --no-print-directory -C "$repo" static-bin)
	STATIC_LIBC=${rel#*-unknown-linux-}
	STATIC_LIBC=${STATIC_LIBC%%/*}
	export STATIC_LIBC
	${MAKE:-make} -C "$repo" static
	bin=$repo/$rel
fi

# The "before" row of the IPv6 section and column of the phase table: the static build of an
# earlier commit as it shipped then (its `make static` when it has one; 49f5276, the default,
# the state before issue #18's short-DAD sequence, has none: static glibc), from a temporary git worktree with
# its own target directory under target/ (outside /tmp, so the VM sees it), trials interleaved
# with the current binary's in the same run.
before_rev=${BENCH_BEFORE_REV:-49f5276}
((fabric_only || k8s_only)) && before_rev=none
before_bin=
if [[ $before_rev != none ]]; then
	bdir=$repo/target/bench-before
	before_bin=$bdir/roce-ipvlan-$before_rev
	if [[ ! -x $before_bin ]]; then
		git -C "$repo" worktree remove --force "$bdir/src" 2>/dev/null || rm -rf "$bdir/src"
		git -C "$repo" worktree prune
		git -C "$repo" worktree add --detach "$bdir/src" "$before_rev"
		if make -s --no-print-directory -C "$bdir/src" static-bin >/dev/null 2>&1; then
			# A commit with `make static` is built as it shipped (its own Makefile's libc and
			# flags), in its worktree's target directory, kept for the next run.
			mkdir -p "$bdir/target"
			ln -sfn "$bdir/target" "$bdir/src/target"
			${MAKE:-make} -C "$bdir/src" static
			cp "$bdir/src/$(make -s --no-print-directory -C "$bdir/src" static-bin)" "$before_bin"
		else
			(cd "$bdir/src" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR=$bdir/target \
				${CARGO:-cargo} build --locked --release --target "$(uname -m)-unknown-linux-gnu" -p roce-ipvlan)
			cp "$bdir/target/$(uname -m)-unknown-linux-gnu/release/roce-ipvlan" "$before_bin"
		fi
		git -C "$repo" worktree remove --force "$bdir/src"
	fi
fi

# fabric: bench/fabric.sh on tests/fabric's two hosts with this binary; its numbers in
# $out/fabric.json, its section spliced into the page (bench/fabric_report.py).
fabric() {
	local flog
	flog=$(mktemp "${TMPDIR:-/tmp}/roce-bench-fabric.XXXXXX")
	FABRIC_LAYOUT=flat VM_RDMA=ofed ROCE_IPVLAN_BIN=$bin tests/fabric/run.sh "$here/fabric.sh" \
		"${BENCH_FABRIC_ROUNDS:-5}" "${BENCH_FABRIC_SIZE:-65536}" "${BENCH_FABRIC_ITERS:-1000}" | tee "$flog"
	grep '^@@FABRIC-BENCH-JSON ' "$flog" | tail -n 1 | cut -d' ' -f2- >"$out/fabric.json.new"
	rm -f "$flog"
	[[ -s $out/fabric.json.new ]] || { rm -f "$out/fabric.json.new"; echo "bench: the fabric printed no results" >&2; exit 1; }
	mv "$out/fabric.json.new" "$out/fabric.json"
	python3 "$here/fabric_report.py" --json "$out/fabric.json" --doc "$doc"
}

# k8s: bench/k8s-start.sh on the one-node cluster of tests/k8s (the OFED view of the 7.x kernel,
# as make k8s-test), which installs the tree's binary from its installer image; its numbers,
# with this host's, in $out/k8s-start.json, its section spliced into the page
# (bench/k8s_start_report.py).
k8s() {
	local klog others_k8s
	klog=$(mktemp "${TMPDIR:-/tmp}/roce-bench-k8s.XXXXXX")
	others_k8s=$(pgrep -c qemu-system || true)
	VM_KERNEL=${VM_KERNEL:-backports} VM_RDMA=ofed tests/k8s/run.sh "$here/k8s-start.sh" \
		"${BENCH_K8S_PODS:-5}" "${BENCH_K8S_WARMUP:-1}" | tee "$klog"
	grep '^@@K8S-START-JSON ' "$klog" | tail -n 1 | cut -d' ' -f2- |
		jq --arg cpu "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)" --argjson cpus "$(nproc)" \
			--arg qemu "$(qemu-system-x86_64 --version | head -n1)" --argjson others "$others_k8s" \
			--argjson others_end "$(pgrep -c qemu-system || true)" \
			--arg date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
			'.date = $date | .host = {cpu: $cpu, cpus: $cpus, qemu: $qemu, other_qemu: $others, other_qemu_end: $others_end}' \
			>"$out/k8s-start.json.new" || true
	rm -f "$klog"
	[[ -s $out/k8s-start.json.new ]] || { rm -f "$out/k8s-start.json.new"; echo "bench: the pod-start bench printed no results" >&2; exit 1; }
	mv "$out/k8s-start.json.new" "$out/k8s-start.json"
	python3 "$here/k8s_start_report.py" --json "$out/k8s-start.json" --doc "$doc"
}
if ((fabric_only)); then
	fabric
	echo "bench: wrote the fabric section of $doc and $out/fabric.json in $(($(date +%s) - start)) s"
	exit 0
fi
if ((k8s_only)); then
	k8s
	echo "bench: wrote the pod-start section of $doc and $out/k8s-start.json in $(($(date +%s) - start)) s"
	exit 0
fi

others=$(pgrep -c qemu-system || true)
rails=$(for ((i = 0; i < nrails; i++)); do printf 'rdma%d ' "$i"; done)
log=$(mktemp "${TMPDIR:-/tmp}/roce-bench.XXXXXX")
trap 'rm -f "$log"' EXIT
# 16 rails + 16 peer NICs do not fit QEMU's 32 PCI slots: 4 peers (IPv6 routers) are enough.
# BENCH_* variables reach the guest through boot.sh only when listed there, so pass them on
# the command line instead.
benv=()
for v in $(compgen -e | grep '^BENCH_' || true); do benv+=("$v=${!v}"); done
ROCE_IPVLAN_BIN=$bin VM_RAILS=${rails% } VM_PEERS=4 VM_TIMEOUT=${VM_TIMEOUT:-3000} \
	tests/vm/run.sh env "${benv[@]}" BENCH_BEFORE_BIN="$before_bin" BENCH_BEFORE_REV="$before_rev" python3 "$here/guest.py" | tee "$log"
grep '^@@BENCH-JSON ' "$log" | tail -n 1 | cut -d' ' -f2- >"$out/raw.json"
[[ -s $out/raw.json ]] || { echo "bench: the VM printed no results" >&2; exit 1; }

python3 "$here/report.py" --raw "$out/raw.json" --out "$out" --doc "$doc" \
	--plugin "$bin" --go-plugins /usr/lib/cni --qemu "$(qemu-system-x86_64 --version | head -n1)" \
	--host-cpu "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)" --host-cpus "$(nproc)" \
	--other-qemu "$others" --other-qemu-end "$(pgrep -c qemu-system || true)" --runtime "$(($(date +%s) - start))" \
	--libcni "$(sed -n 's|.*github.com/containernetworking/cni \(v[^ ]*\).*|\1|p' tests/cnidriver/go.mod | head -n1)"
if [[ ${BENCH_FABRIC:-1} != 0 ]]; then
	fabric
elif [[ -s $out/fabric.json ]]; then
	# The page was written anew: keep the last fabric figures on it, marked by their own file.
	python3 "$here/fabric_report.py" --json "$out/fabric.json" --doc "$doc"
fi
if [[ ${BENCH_K8S:-1} != 0 ]]; then
	k8s
elif [[ -s $out/k8s-start.json ]]; then
	python3 "$here/k8s_start_report.py" --json "$out/k8s-start.json" --doc "$doc"
fi
echo "bench: wrote $doc and $out/ in $(($(date +%s) - start)) s"
