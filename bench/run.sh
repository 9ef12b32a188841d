#!/usr/bin/env bash
# make bench: roce-ipvlan against the ipvlan + tuning + sbr chain, in one VM boot with 16 rails.
# Builds the binary users get (`make static`: the static release build that deploy/Containerfile's
# image ships, target/<arch>-unknown-linux-gnu/release/roce-ipvlan), boots the VM harness
# (tests/vm/run.sh) with bench/guest.py, keeps the raw numbers in docs/bench/ and regenerates
# docs/benchmarks.md (bench/report.py).
#
# Environment: BENCH_* sizes (see bench/guest.py; defaults are the published ones),
# BENCH_RAILS (16), BENCH_OUT (docs/bench), BENCH_DOC (docs/benchmarks.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
out=${BENCH_OUT:-$repo/docs/bench}
doc=${BENCH_DOC:-$repo/docs/benchmarks.md}
nrails=${BENCH_RAILS:-16}
mkdir -p "$out"

start=$(date +%s)
# BENCH_BIN: measure this binary instead of building the tree's (it must live outside /tmp,
# /run and /var/tmp, which are fresh tmpfs inside the VM); BENCH_BIN_NOTE says what it is.
bin=${BENCH_BIN:-}
if [[ -z $bin ]]; then
	# The Makefile's static target checks that the binary has no interpreter; the path is its
	# STATIC_BIN for this host's architecture (the image's default).
	${MAKE:-make} -C "$repo" static
	bin=$repo/target/$(uname -m)-unknown-linux-gnu/release/roce-ipvlan
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
	tests/vm/run.sh env "${benv[@]}" python3 "$here/guest.py" | tee "$log"
grep '^@@BENCH-JSON ' "$log" | tail -n 1 | cut -d' ' -f2- >"$out/raw.json"
[[ -s $out/raw.json ]] || { echo "bench: the VM printed no results" >&2; exit 1; }

python3 "$here/report.py" --raw "$out/raw.json" --out "$out" --doc "$doc" \
	--plugin "$bin" --go-plugins /usr/lib/cni --qemu "$(qemu-system-x86_64 --version | head -n1)" \
	--host-cpu "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)" --host-cpus "$(nproc)" \
	--other-qemu "$others" --other-qemu-end "$(pgrep -c qemu-system || true)" --runtime "$(($(date +%s) - start))"
echo "bench: wrote $doc and $out/ in $(($(date +%s) - start)) s"
