# shellcheck shell=bash
# Test helpers for the VM suite (sourced by suite/run.sh, inside the VM).
# A test is a function named test_* in suite/*.sh. It runs in its own subshell with
# 'set -euo pipefail'; the first failing assertion ends it with a message. Namespaces it creates
# with new_pod are deleted afterwards even when it fails.

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "  - $*"; }

assert_eq() { # assert_eq GOT WANT WHAT
	[[ $1 == "$2" ]] || fail "$3: got '$1', want '$2'"
}
assert_match() { # assert_match TEXT ERE WHAT
	[[ $1 =~ $2 ]] || fail "$3: '$1' does not match /$2/"
}
assert_no_match() { # assert_no_match TEXT ERE WHAT
	[[ ! $1 =~ $2 ]] || fail "$3: '$1' unexpectedly matches /$2/"
}
# run_cmd CMD...: run without aborting the test; sets OUT (stdout), ERR (stderr) and RC.
run_cmd() {
	local o e
	o=$(mktemp) e=$(mktemp)
	RC=0
	"$@" >"$o" 2>"$e" || RC=$?
	OUT=$(cat "$o") ERR=$(cat "$e")
	rm -f "$o" "$e"
}
assert_ok() { # assert_ok CMD...: must succeed; OUT holds its stdout
	run_cmd "$@"
	((RC == 0)) || fail "'$*' exited $RC: ${OUT:+stdout: $OUT }${ERR:+stderr: $ERR}"
}
assert_fails() { # assert_fails CMD...: must exit non-zero; OUT/ERR hold what it said
	run_cmd "$@"
	((RC != 0)) || fail "'$*' succeeded but should have failed (stdout: $OUT)"
}

# --- pods ---
PODS=()
new_pod() { # new_pod NAME: fresh netns at /run/netns/NAME with lo up
	ip netns add "$1"
	PODS+=("$1")
	ip -n "$1" link set lo up
}
cleanup_pods() {
	local p
	for p in "${PODS[@]}"; do ip netns del "$p" 2>/dev/null || true; done
}
in_pod() { local p=$1; shift; ip netns exec "$p" "$@"; }

require_plugin() {
	[[ -x $CNI_BIN_DIR/roce-ipvlan ]] ||
		fail "roce-ipvlan binary not found (ROCE_IPVLAN_BIN=${ROCE_IPVLAN_BIN:-unset}); build it with 'make build'"
}

# The suite's configurations carry these time limits (configuration.md, "Time limits"): the
# defaults (20 s per ADD, 10 s per IPAM call) are for a node, and the VM is emulated (TCG),
# often next to other VMs on the same cores, where a bash fake IPAM with jq and host-local, or
# 128 parallel ADDs queueing on host-local's lock, can take longer. Tests of the limits set
# their own "timeouts" (the EXTRA_JSON below replaces this one).
VM_TIMEOUTS='{"timeouts": {"totalMs": 120000, "ipamMs": 120000}}'

# roce_conf FILE NAME MASTER VERSION SUBNET [EXTRA_JSON]: a roce-ipvlan config with host-local
roce_conf() {
	jq -n --arg name "$2" --arg master "$3" --arg v "$4" --arg subnet "$5" \
		--argjson extra "${6:-{\}}" --argjson limits "$VM_TIMEOUTS" \
		'{cniVersion: $v, name: $name, type: "roce-ipvlan", master: $master, mode: "l2",
		  ipam: {type: "host-local", subnet: $subnet}} + $limits + $extra' >"$1"
}

# --- GIDs ---
gid_long() { # gid_long GID: any IPv6 spelling -> the 8x4-hex form sysfs prints
	# In bash: a python3 start costs about a second under TCG, and the suite calls this a lot.
	local a=${1,,} head tail g out=() n i o1 o2 o3 o4
	[[ $a == *::* ]] || { head=$a tail=; }
	[[ $a != *::* ]] || { head=${a%%::*} tail=${a#*::}; }
	local -a hs=() ts=()
	[[ -z $head ]] || IFS=: read -r -a hs <<<"$head"
	[[ -z $tail ]] || IFS=: read -r -a ts <<<"$tail"
	# An embedded IPv4 tail (::ffff:10.9.0.7) stands for two groups.
	if ((${#ts[@]})) && [[ ${ts[-1]} == *.* ]]; then
		IFS=. read -r o1 o2 o3 o4 <<<"${ts[-1]}"
		unset 'ts[-1]'
		ts+=("$(printf '%x' $((o1 * 256 + o2)))" "$(printf '%x' $((o3 * 256 + o4)))")
	elif ((${#hs[@]})) && [[ ${hs[-1]} == *.* ]]; then
		IFS=. read -r o1 o2 o3 o4 <<<"${hs[-1]}"
		unset 'hs[-1]'
		hs+=("$(printf '%x' $((o1 * 256 + o2)))" "$(printf '%x' $((o3 * 256 + o4)))")
	fi
	n=$((8 - ${#hs[@]} - ${#ts[@]}))
	for g in "${hs[@]}"; do out+=("$g"); done
	for ((i = 0; i < n; i++)); do out+=(0); done
	for g in "${ts[@]}"; do out+=("$g"); done
	((${#out[@]} == 8)) || { echo "gid_long: cannot parse $1" >&2; return 1; }
	printf '%04x:%04x:%04x:%04x:%04x:%04x:%04x:%04x\n' "${out[@]/#/0x}"
}
gid_of_ipv4() { gid_long "::ffff:$1"; }

# find_gid POD DEV PORT IPV4 NDEV: print the index of the RoCE v2 GID for IPV4 on NDEV, as
# seen from inside POD (DOCA-OFED hides other namespaces' GIDs; upstream shows all of them).
find_gid() {
	local want f i
	want=$(gid_of_ipv4 "$4")
	for f in $(in_pod "$1" grep -lx "$want" /sys/class/infiniband/"$2"/ports/"$3"/gids/* 2>/dev/null); do
		i=${f##*/}
		[[ $(in_pod "$1" cat "/sys/class/infiniband/$2/ports/$3/gid_attrs/types/$i") == "RoCE v2" ]] || continue
		[[ $(in_pod "$1" cat "/sys/class/infiniband/$2/ports/$3/gid_attrs/ndevs/$i") == "$5" ]] || continue
		echo "$i"
		return 0
	done
	return 1
}

gid_present() { # gid_present DEV IPV4: any GID for IPV4 left on DEV (host view)
	grep -qlx "$(gid_of_ipv4 "$2")" /sys/class/infiniband/"$1"/ports/*/gids/* 2>/dev/null
}

# --- what an attachment must look like (docs/contract.md) ---
# verify_attachment POD IFNAME RAIL CIDR [RAW_RESULT_FILE]
# Prints "DEV PORT INDEX TABLE" for later checks.
verify_attachment() {
	local pod=$1 ifn=$2 rail=$3 cidr=$4 raw=${5:-} ip=${4%/*} link dev port idx gid alias table k v
	ip=${cidr%/*}

	link=$(in_pod "$pod" ip -d link show dev "$ifn") || fail "$ifn missing in $pod"
	assert_match "$link" 'ipvlan +mode l2' "$ifn is an IPvlan L2 child"
	assert_eq "$(in_pod "$pod" cat "/sys/class/net/$ifn/iflink")" "$(cat "/sys/class/net/$rail/ifindex")" \
		"$ifn's lower device is $rail"
	assert_match "$(in_pod "$pod" ip -4 -o addr show dev "$ifn")" "inet ${cidr//./\\.} " "$ifn has $cidr"

	for kv in arp_announce=2 arp_filter=1 arp_ignore=1 rp_filter=0 accept_local=1; do
		k=${kv%=*} v=${kv#*=}
		assert_eq "$(in_pod "$pod" cat "/proc/sys/net/ipv4/conf/$ifn/$k")" "$v" "$ifn $k"
	done
	assert_eq "$(in_pod "$pod" cat /proc/sys/net/ipv4/conf/all/rp_filter)" 0 "pod all.rp_filter"

	table=$((10000 + $(in_pod "$pod" cat "/sys/class/net/$ifn/ifindex")))
	# Anchored at the end: a rule whose action is not "to table" prints a trailing type
	# ("lookup 10002 none") and makes every lookup from that source fail with EINVAL.
	# grep without -q: ip flushes each rule as it prints it, and a grep that quits at the first
	# match can make it die of SIGPIPE, which pipefail turns into a failed match.
	in_pod "$pod" ip -4 rule show | grep -E "^1000:[[:space:]]+from ${ip//./\\.} lookup ${table}[[:space:]]*$" >/dev/null ||
		fail "no rule '1000: from $ip lookup $table' in $pod (a trailing 'none' means the rule's" \
			"action is FR_ACT_UNSPEC, not FR_ACT_TO_TBL): $(in_pod "$pod" ip -4 rule show | tr '\n' ';')"
	routes=$(in_pod "$pod" ip -4 route show table "$table")
	[[ -n $routes ]] || fail "table $table is empty"
	while read -r line; do
		assert_match "$line" "dev $ifn( |$)" "route in table $table uses $ifn"
	done <<<"$routes"

	# The ifalias tells the pod which RDMA device, port and GID index belong to its child.
	alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
	assert_match "$alias" '^rdma_dev=[^ ]+ port=[0-9]+ gid_index=[0-9]+ gid=[^ ]+$' "$ifn ifalias format"
	for kv in $alias; do
		case $kv in
		rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;;
		gid_index=*) idx=${kv#*=} ;; gid=*) gid=${kv#*=} ;;
		esac
	done
	assert_eq "$dev" "$(rail_rdma_dev "$rail")" "RDMA device of $rail"
	assert_eq "$(gid_long "$gid")" "$(gid_of_ipv4 "$ip")" "ifalias gid"
	local base=/sys/class/infiniband/$dev/ports/$port
	assert_eq "$(in_pod "$pod" cat "$base/gids/$idx")" "$(gid_of_ipv4 "$ip")" "GID $dev/$port/$idx seen from the pod"
	assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/types/$idx")" "RoCE v2" "GID type of $dev/$port/$idx"
	assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/ndevs/$idx")" "$ifn" "GID ndev of $dev/$port/$idx"

	if [[ -n $raw ]]; then
		assert_eq "$(jq -r .roce.rdmaDevice "$raw")" "$dev" "result roce.rdmaDevice"
		assert_eq "$(jq -r .roce.port "$raw")" "$port" "result roce.port"
		assert_eq "$(jq -r .roce.gidIndex "$raw")" "$idx" "result roce.gidIndex"
		assert_eq "$(gid_long "$(jq -r .roce.gid "$raw")")" "$(gid_of_ipv4 "$ip")" "result roce.gid"
		assert_eq "$(jq -r .roce.gidType "$raw")" "RoCE v2" "result roce.gidType"
	fi
	echo "$dev $port $idx $table"
}

# verify_gone POD IFNAME NETNAME IPV4 DEV TABLE: DEL left nothing behind
verify_gone() {
	local pod=$1 ifn=$2 net=$3 ip=$4 dev=$5 table=$6
	if [[ -e /run/netns/$pod ]]; then
		! in_pod "$pod" ip link show dev "$ifn" >/dev/null 2>&1 || fail "$ifn still exists in $pod"
		assert_no_match "$(in_pod "$pod" ip -4 rule show)" "lookup $table( |$)" "rule for table $table"
		assert_eq "$(in_pod "$pod" ip -4 route show table "$table" 2>/dev/null)" "" "routes in table $table"
	fi
	[[ ! -e /var/lib/cni/networks/$net/$ip ]] || fail "host-local still holds $ip (/var/lib/cni/networks/$net/$ip)"
	! gid_present "$dev" "$ip" || fail "a GID for $ip is still on $dev"
}

host_local_ips() { # host_local_ips NETNAME: allocated addresses (file names that are IPs)
	local f
	for f in /var/lib/cni/networks/"$1"/*; do
		f=${f##*/}
		if [[ $f =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then echo "$f"; fi
	done
}

cni_code() { jq -r '.code // empty' <<<"$1" 2>/dev/null || true; }

# fake_ipam NAME MODE: an IPAM plugin at $CNI_BIN_DIR/NAME for fault and STATUS/GC tests. Every
# call appends "COMMAND CONTAINERID IFNAME" to /run/fake-ipam/NAME.log and saves its stdin as
# /run/fake-ipam/NAME.COMMAND.json. ADD/DEL are delegated to the real host-local (so
# allocations show under /var/lib/cni/networks/<name>/) except where MODE says otherwise:
#   v11      VERSION lists 1.1.0; STATUS/GC succeed unless /run/fake-ipam/NAME.fail holds a
#            CNI code, which they then fail with
#   fail     ADD fails with CNI error 11 "pool exhausted (fake)"
#   garbage  ADD prints something that is not JSON and exits 0
#   noips    ADD prints a result with no ips
#   killns   ADD allocates, deletes the pod's netns (ip netns del), then returns the address
#   slow     ADD allocates, writes its pid to /run/fake-ipam/NAME.pid, waits 600 s, returns
#   hang     ADD allocates, starts a helper process (its pid in NAME.helper), writes its pid to
#            NAME.pid and waits forever
#   late     ADD writes its pid to NAME.pid, waits for a line on the FIFO NAME.go, then
#            allocates and returns the address (an IPAM that allocates after a slow start)
# Waits are bash builtins (read on a FIFO held open read-write, so no EOF ever comes), so the
# pid in NAME.pid is the only process of the IPAM plugin unless a mode says otherwise.
fake_ipam() {
	local name=$1 mode=$2
	mkdir -p /run/fake-ipam
	rm -f "/run/fake-ipam/$name".*
	cat >"$CNI_BIN_DIR/$name" <<-SCRIPT
		#!/bin/bash
		set -u
		in=\$(cat)
		state=/run/fake-ipam/$name
		echo "\$CNI_COMMAND \${CNI_CONTAINERID:-} \${CNI_IFNAME:-}" >>"\$state.log"
		printf '%s' "\$in" >"\$state.\$CNI_COMMAND.json"
		v=\$(jq -r '.cniVersion // "1.0.0"' <<<"\$in")
		hl() { jq '.ipam.type = "host-local" | .cniVersion = (if .cniVersion == "1.1.0" then "1.0.0" else .cniVersion end)' <<<"\$in" | $CNI_BIN_DIR/host-local; }
		pause() { local f=\$state.pause.\$\$; mkfifo "\$f"; read -r \${1:+-t "\$1"} _ <>"\$f"; rm -f "\$f"; }
		err() { printf '{"cniVersion":"%s","code":%s,"msg":"%s"}\n' "\$v" "\$1" "\$2"; exit 1; }
		case "\$CNI_COMMAND/$mode" in
		VERSION/v11) echo '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
		VERSION/*) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}' ;;
		STATUS/*|GC/*) [[ -s \$state.fail ]] && err "\$(cat "\$state.fail")" "fake IPAM is not ready" ; exit 0 ;;
		ADD/fail) err 11 "pool exhausted (fake)" ;;
		ADD/garbage) echo "this is not JSON" ;;
		ADD/noips) echo "{\"cniVersion\":\"\$v\",\"ips\":[]}" ;;
		ADD/killns) out=\$(hl) || { echo "\$out"; exit 1; }; ip netns del "\$(basename "\$CNI_NETNS")"; echo "\$out" ;;
		ADD/slow) out=\$(hl) || { echo "\$out"; exit 1; }; echo \$\$ >"\$state.pid"; pause 600; echo "\$out" ;;
		ADD/hang) out=\$(hl) || { echo "\$out"; exit 1; }; sleep 1000 & echo \$! >"\$state.helper"; echo \$\$ >"\$state.pid"; pause ;;
		ADD/late) echo \$\$ >"\$state.pid"; read -r _ <>"\$state.go"; hl ;;
		*) hl ;;
		esac
	SCRIPT
	[[ $mode != late ]] || mkfifo "/run/fake-ipam/$name.go"
	chmod +x "$CNI_BIN_DIR/$name"
}

alive() { # alive PID: the process exists and is not a zombie
	local stat
	[[ $1 =~ ^[0-9]+$ ]] || fail "alive: '$1' is not a process id"
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]]
}

# wait_dead PID WHAT: the process ends within 10 s (it was sent SIGKILL, or must have been).
# Bounded by the clock, not by a count of polls: under a loaded TCG host a poll can take long.
wait_dead() {
	local deadline=$((SECONDS + 10))
	while alive "$1"; do
		((SECONDS < deadline)) ||
			fail "$2: process $1 ($(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)) is still running"
		sleep 0.1
	done
}

# pod_links, pod_rules and count_lines are compared with "" or 0 ("nothing left"), inside a
# command substitution whose status nobody sees: when `ip` cannot read the pod (its netns gone,
# the exec failed) they print what failed instead of nothing, so that such a check fails.

# pod_links POD: the pod's links other than lo, space-separated ("" when none)
pod_links() {
	local out
	out=$(in_pod "$1" ip -o link show) || { echo "(ip -o link show in pod $1 failed)"; return 1; }
	awk -F': ' '$2 != "lo" {sub(/@.*/, "", $2); printf "%s ", $2}' <<<"$out"
}

# pod_rules POD: the pod's source rules into per-child tables (10000+ifindex), IPv4 and IPv6
pod_rules() {
	local v4 v6
	v4=$(in_pod "$1" ip -4 rule show) || { echo "(ip -4 rule show in pod $1 failed)"; return 1; }
	v6=$(in_pod "$1" ip -6 rule show) || { echo "(ip -6 rule show in pod $1 failed)"; return 1; }
	grep -E 'lookup 1[0-9]{4}' <<<"$v4"$'\n'"$v6" || (($? == 1))
}

# count_lines [-v] ERE CMD...: how many lines of CMD's output match ERE (with -v: do not)
count_lines() {
	local v=() re out
	[[ $1 != -v ]] || { v=(-v); shift; }
	re=$1
	shift
	out=$("$@") || { echo "('$*' failed)"; return 1; }
	grep -cE "${v[@]}" -- "$re" <<<"$out" || (($? == 1))
}

# host_snapshot: what a failed or killed ADD must never change in the host namespace: its links
# and their IPvlan children, its rules, and the rails' and the host's IPv4 conf sysctls.
host_snapshot() {
	ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort
	ip -4 rule show
	ip -6 rule show
	local f
	for f in /proc/sys/net/ipv4/conf/{all,default,rdma0,rdma1,rdma2,rdma3}/{rp_filter,arp_ignore,arp_announce,arp_filter,accept_local}; do
		[[ -e $f ]] && echo "$f=$(cat "$f")"
	done
}
