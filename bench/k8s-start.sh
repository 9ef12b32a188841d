#!/usr/bin/env bash
# The pod-start section of make bench (bench/run.sh; alone: make bench-k8s), issue #37: on the
# one-node Kubernetes cluster of tests/k8s, how long a pod on the node's 4 rails takes to start
# through the seed's chain (4 NADs, one per rail, of ipvlan L2 + tuning with the field report's
# ARP sysctls + sbr, IPAM nv-ipam) and through one roce-ipvlan NAD with "rails"
# (examples/pod-16-rails-one-nad.yaml, nv-ipam), both from examples/a100-ippool.yaml's pool.
# Runs on the node:
#
#   VM_RDMA=ofed VM_KERNEL=backports tests/k8s/run.sh bench/k8s-start.sh [PODS [WARMUP]]
#
# PODS pods of each kind (default 5), after WARMUP unmeasured pods of each (default 1: the
# first pod on a fresh node pays for cold page caches and Multus's first delegate execs), one
# pod at a time, the kinds interleaved ABBA. For each pod: from just before `kubectl apply` to
# `kubectl wait --for=condition=Ready` returning (the pod has no readiness probe: Ready is its
# container started and reported), and to the moment a process in the pod first sees the RoCE v2
# GID of every child's address (the container's own command polls sysfs with shell builtins
# only and stamps the time; the VM's one clock serves the node and the pod). Then delete the
# pod and wait until it is gone. From containerd's log: when the pod's RunPodSandbox began and
# returned (the pod network, Multus and every delegate included), so the time splits into
# before the sandbox (API server, scheduler, kubelet), the sandbox, and after it.
# A pod that fails (not Ready, no GID in 120 s, not gone) is recorded as failed, with why, and
# deleted, and the bench goes on; it fails only when a kind has no measured pod left.
# Prints a table of medians and one line "@@K8S-START-JSON {...}" for bench/k8s_start_report.py.
set -euo pipefail
export LC_ALL=C # EPOCHREALTIME's decimal point
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=../tests/k8s/suite/lib.sh
source "$repo/tests/k8s/suite/lib.sh"

pods=${1:-5} warmup=${2:-1}
[[ $pods =~ ^[1-9][0-9]*$ && $warmup =~ ^[0-9]+$ ]] || fail "usage: k8s-start.sh [PODS [WARMUP]] (PODS >= 1)"
rails=(rdma0 rdma1 rdma2 rdma3)
work=/run/k8s-start
mkdir -p "$work"

# The chain's plugins are Debian's containernetworking-plugins (/usr/lib/cni, linked into
# /opt/cni/bin by node_host, tests/k8s/lib.sh), as bench/guest.py's chain.
for p in ipvlan tuning sbr nv-ipam roce-ipvlan; do
	[[ -x /opt/cni/bin/$p ]] || fail "no /opt/cni/bin/$p on the node (it has: $(echo /opt/cni/bin/*))"
done

# --- the networks -----------------------------------------------------------------------------
example_pool >/dev/null
# The seed's chain, one NAD per rail: the field report's A100 networks with this node's rails
# and the example's pool. Its sbr had "addSourceHints", which Debian's sbr (1.1.1) does not
# know (it ignores unknown keys), so it is left out.
chain_sysctls='{"net.ipv4.conf.all.rp_filter": "0",
	"net.ipv4.conf.IFNAME.arp_announce": "2", "net.ipv4.conf.IFNAME.arp_filter": "1",
	"net.ipv4.conf.IFNAME.arp_ignore": "1", "net.ipv4.conf.IFNAME.rp_filter": "0",
	"net.ipv4.conf.IFNAME.accept_local": "1"}'
chain_nets=() rail_devs=()
for i in "${!rails[@]}"; do
	d=$(rail_rdma_dev "${rails[i]}") || fail "no RDMA device on ${rails[i]}: $(rdma link show)"
	rail_devs+=("$d")
	nad "bench-chain-$i" "$(jq -cn --arg name "bench-chain-$i" --arg rail "${rails[i]}" --argjson sysctl "$chain_sysctls" \
		'{cniVersion: "1.0.0", name: $name, plugins: [
			{type: "ipvlan", master: $rail, mode: "l2", ipam: {type: "nv-ipam", poolName: "rdma-rail-pool"}},
			{type: "tuning", sysctl: $sysctl},
			{type: "sbr"}]}')"
	chain_nets+=("bench-chain-$i")
done
example_nad examples/pod-16-rails-one-nad.yaml rdma-all-rails

# --- the pods ---------------------------------------------------------------------------------
# The pod's command, given KIND and one IFNAME[=RDMA_DEVICE] per child: find each child's IPv4
# address (one `ip`, before the clock matters: the sandbox's network is set up before the
# container starts), then poll sysfs until the RoCE v2 GID of every address is readable in the
# pod, on that child: for roce-ipvlan at the index of the child's ifalias (what a workload
# reads); for the chain, which reports no index, in the first 64 slots of the rail's RDMA device
# (the one under the NAD's master, which the operator knows; the kernel gives a new GID the first
# free slot, and a slot whose netdev is in another namespace reads as zeros in the OFED view).
# Builtins only in the loop (an exec is tens of milliseconds under TCG), 10 ms apart (a read
# with a timeout on a pipe that stays empty), so a waiting probe does not take a CPU from the
# kubelet. Gives up after 120 s. Prints "@@PODSTART start=T gid=T polls=N" and sleeps.
# shellcheck disable=SC2016 # expanded in the pod
probe='kind=$1; shift; t_start=$EPOCHREALTIME
declare -A want seen dev
for a in "$@"; do dev[${a%%=*}]=${a#*=}; done
exec {idle}<> <(:)
while read -r _ ifn _ addr _; do
	IFS=./ read -r o1 o2 o3 o4 _ <<<"$addr"
	printf -v "want[$ifn]" "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" "$o1" "$o2" "$o3" "$o4"
done < <(ip -4 -o addr show scope global)
gid_ok() { # DEV PORT INDEX IFNAME: the slot holds the RoCE v2 GID of the address of IFNAME, on IFNAME
	local g t n p=/sys/class/infiniband/$1/ports/$2
	{ read -r g <"$p/gids/$3" && [[ $g == "${want[$4]}" ]] && read -r t <"$p/gid_attrs/types/$3" &&
		read -r n <"$p/gid_attrs/ndevs/$3"; } 2>/dev/null && [[ $t == "RoCE v2" && $n == "$4" ]]
}
polls=0
while :; do
	polls=$((polls + 1)) left=0
	for ifn in "${!dev[@]}"; do
		[[ -n ${seen[$ifn]:-} || -z ${want[$ifn]:-} ]] && { [[ -n ${seen[$ifn]:-} ]] || left=$((left + 1)); continue; }
		if [[ $kind == roce ]]; then
			d="" port="" idx="" alias=""
			read -r alias <"/sys/class/net/$ifn/ifalias" 2>/dev/null || true
			for kv in $alias; do case $kv in rdma_dev=*) d=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; esac; done
			[[ -n $idx ]] && gid_ok "$d" "$port" "$idx" "$ifn" && seen[$ifn]=$idx
		else
			g="" p=/sys/class/infiniband/${dev[$ifn]}/ports/1/gids
			for ((i = 0; i < 64; i++)); do
				read -r g <"$p/$i" 2>/dev/null || continue
				[[ $g == "${want[$ifn]}" ]] && gid_ok "${dev[$ifn]}" 1 "$i" "$ifn" && { seen[$ifn]=$i; break; }
			done
		fi
		[[ -n ${seen[$ifn]:-} ]] || left=$((left + 1))
	done
	((left == 0)) && break
	if ((${EPOCHREALTIME%.*} - ${t_start%.*} > 120)); then
		echo "@@PODSTART fail: no GID on some of ${!dev[*]} after 120 s (addresses on: ${!want[*]}; GIDs seen on: ${!seen[*]})"
		exec sleep infinity
	fi
	read -r -t 0.01 -u "$idle" _ || true
done
echo "@@PODSTART start=$t_start gid=$EPOCHREALTIME polls=$polls"
exec sleep infinity'

# pod_json KIND NAME: the pod (testpod_yaml: the test-pod image, the RDMA shared resource,
# IPC_LOCK), attached as KIND asks, running the probe for that kind's children.
pod_json() {
	local kind=$1 name=$2 nets ifs=() i
	if [[ $kind == roce ]]; then
		nets=rdma-all-rails
		for i in "${!rails[@]}"; do ifs+=("net1r$i"); done
	else
		nets=$(IFS=,; echo "${chain_nets[*]}")
		for i in "${!rails[@]}"; do ifs+=("net$((i + 1))=${rail_devs[i]}"); done
	fi
	testpod_yaml "$name" "$nets" | kubectl create --dry-run=client -o json -f - |
		jq --arg probe "$probe" --arg kind "$kind" '.spec.containers[0].command = (["bash", "-c", $probe, "probe", $kind] + $ARGS.positional)' \
			--args "${ifs[@]}"
}

# sandbox_times UID: "BEGIN END" (epoch seconds) of the pod's RunPodSandbox in containerd's log.
sandbox_times() {
	local lines b e
	lines=$(grep -F "RunPodSandbox for" "$K8S_LOGS/containerd.log" | grep -F "$1") || { echo "null null"; return; }
	b=$(grep -v 'returns sandbox id' <<<"$lines" | head -n 1 | sed -n 's/^time="\([^"]*\)".*/\1/p')
	e=$(grep 'returns sandbox id' <<<"$lines" | head -n 1 | sed -n 's/^time="\([^"]*\)".*/\1/p')
	echo "$([[ -n $b ]] && date -d "$b" +%s.%N || echo null) $([[ -n $e ]] && date -d "$e" +%s.%N || echo null)"
}

# sandbox_ipam UID: nv-ipam's calls for the pod's sandbox (bench/k8s_ipam_window.py), as JSON
# ({} when the logs have none).
sandbox_ipam() {
	local sid out
	sid=$(grep -F "RunPodSandbox for" "$K8S_LOGS/containerd.log" | grep -F "$1" | grep -F 'returns sandbox id' |
		grep -o '[0-9a-f]\{64\}' | head -n 1) || true
	[[ -n $sid ]] && out=$(python3 "$here/k8s_ipam_window.py" "$sid" </var/log/nv-ipam-cni.log 2>/dev/null) || out=""
	echo "${out:-"{}"}"
}

# one KIND NAME: start, time and delete one pod; prints its JSON record. Called where errexit
# does not hold (the caller records a failure), so every step checks its own status.
one() {
	local kind=$1 name=$2 file=$work/$2.json t0 t_ready line uid sb ipam t_del t_gone start gid polls
	pod_json "$kind" "$name" >"$file" || fail "no pod manifest for $name"
	t0=$EPOCHREALTIME
	kubectl apply -f "$file" >/dev/null || fail "kubectl apply of $name failed"
	kubectl wait --for=condition=Ready "pod/$name" --timeout=300s >/dev/null || { pod_debug "$name"; fail "$name not Ready in 300 s"; }
	t_ready=$EPOCHREALTIME
	wait_for 300 "$name's probe line" bash -c "kubectl logs $name | grep -q '^@@PODSTART'" || { pod_debug "$name"; fail "$name printed nothing"; }
	line=$(kubectl logs "$name" | grep '^@@PODSTART' | head -n 1) || fail "no probe line from $name"
	[[ $line == *" gid="* ]] || fail "$name: $line"
	start=$(sed -n 's/.* start=\([0-9.]*\).*/\1/p' <<<"$line")
	gid=$(sed -n 's/.* gid=\([0-9.]*\).*/\1/p' <<<"$line")
	polls=$(sed -n 's/.* polls=\([0-9]*\).*/\1/p' <<<"$line")
	uid=$(kubectl get pod "$name" -o jsonpath='{.metadata.uid}') || fail "no uid for $name"
	read -r -a sb <<<"$(sandbox_times "$uid")"
	ipam=$(sandbox_ipam "$uid")
	t_del=$EPOCHREALTIME
	kubectl delete pod "$name" --wait=false >/dev/null || fail "kubectl delete of $name failed"
	wait_pod_gone "$name" 300 || fail "$name not gone 300 s after its delete"
	t_gone=$EPOCHREALTIME
	jq -cn --arg kind "$kind" --arg name "$name" --argjson t0 "$t0" --argjson ready "$t_ready" \
		--argjson start "$start" --argjson gid "$gid" --argjson polls "$polls" \
		--argjson sb0 "${sb[0]}" --argjson sb1 "${sb[1]}" --argjson ipam "$ipam" --argjson del "$t_del" --argjson gone "$t_gone" \
		'def r: . * 1000 | round / 1000;
		 {kind: $kind, pod: $name, ready_s: ($ready - $t0 | r), gid_s: ($gid - $t0 | r),
		  container_s: ($start - $t0 | r), gid_polls: $polls, delete_s: ($gone - $del | r)}
		 + if $sb0 and $sb1 then {sandbox_begin_s: ($sb0 - $t0 | r), sandbox_s: ($sb1 - $sb0 | r),
		     after_sandbox_s: ($start - $sb1 | r)} else {} end + $ipam'
}

echo "k8s-start: $warmup warm-up and $pods measured pod(s) of each kind on ${rails[*]}, one at a time"
records=()
for ((k = 0; k < warmup + pods; k++)); do
	order=(roce chain)
	((k % 2 == 0)) || order=(chain roce)
	for kind in "${order[@]}"; do
		name=bench-$kind-$k
		if ! rec=$(one "$kind" "$name" 2>"$work/$name.err"); then
			cat "$work/$name.err" >&2
			rec=$(jq -cn --arg kind "$kind" --arg name "$name" --arg why "$(grep '^FAIL' "$work/$name.err" | tail -n 1)" \
				'{kind: $kind, pod: $name, failed: $why}')
			kubectl delete pod "$name" --wait=false >/dev/null 2>&1 || true
			wait_pod_gone "$name" 120 || echo "k8s-start: $name is still there after a failure" >&2
		fi
		if ((k < warmup)); then
			rec=$(jq -c '.warmup = true' <<<"$rec")
		fi
		records+=("$rec")
		jq -r 'if .failed then "\(.pod): FAILED \(.failed)" else "\(.pod)\(if .warmup then " (warm-up)" else "" end): Ready \(.ready_s) s, GID \(.gid_s) s; sandbox from \(.sandbox_begin_s) s for \(.sandbox_s) s, container \(.container_s) s; gone \(.delete_s) s after delete" end' <<<"$rec"
	done
done

result=$(printf '%s\n' "${records[@]}" | jq -cs --arg kernel "$(uname -r)" --arg rdma "${VM_RDMA:-upstream}" \
	--argjson cpus "$(nproc)" --argjson pods "$pods" --argjson warmup "$warmup" --arg rails "${rails[*]}" \
	--arg k8s "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" \
	'{kernel: $kernel, rdma_view: $rdma, vcpus: $cpus, pods: $pods, warmup: $warmup,
	  rails: ($rails | split(" ")), kubernetes: $k8s, chain: "ipvlan l2 + tuning + sbr, 4 NADs, nv-ipam",
	  roce: "roce-ipvlan rails [\"rdma*\"], 1 NAD, nv-ipam", runs: .}')
echo "@@K8S-START-JSON $result"
# The table of medians (bench/k8s_start_report.py renders the same for docs/benchmarks.md).
jq -r 'def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
		else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def m(k; f): [.runs[] | select(.kind == k and (.warmup | not) and (.failed | not)) | f | select(. != null)] | med | if . then . * 100 | round / 100 else . end;
	def row(name; f): "\(name)\t\(m("roce"; f))\t\(m("chain"; f))\t\(if m("chain"; f) > 0 then (m("roce"; f) / m("chain"; f) * 100 | round / 100) else "-" end)";
	"median s\troce-ipvlan\tchain\tratio",
	row("apply -> Ready"; .ready_s), row("apply -> GID in pod"; .gid_s),
	row("apply -> sandbox begins"; .sandbox_begin_s), row("sandbox (pod network: Multus, delegates)"; .sandbox_s),
	row("  of it nv-ipam, first call -> last answer"; .ipam_window_s), row("sandbox -> container starts"; .after_sandbox_s), row("container -> GID seen"; .gid_s - .container_s),
	row("delete -> gone"; .delete_s)' <<<"$result" | column -t -s $'\t'
# Medians need a measured pod of each kind.
jq -e '[.runs[] | select((.warmup | not) and (.failed | not)) | .kind] | (index("roce") and index("chain"))' <<<"$result" >/dev/null ||
	fail "no measured pod of one kind (see the FAILED lines)"
# For reading by hand: nv-ipam's CNI calls with their times (its shim's log, ipam-node's
# --cni-log-file); bench/k8s_ipam_window.py reads the same.
grep -E 'CMD ADD Call|CmdAdd succeed' /var/log/nv-ipam-cni.log 2>/dev/null | sed 's/^/nv-ipam-cni: /' || true
