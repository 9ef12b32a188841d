# shellcheck shell=bash
# The fault matrix (docs/failure-modes.md): every failure gives its CNI code and a message that
# names the cause, AND leaves nothing behind: no link in the pod or the host, no host-local
# allocation, no source rule, no change to the pod's or the host's sysctls. Kills with SIGKILL
# at several points of ADD must be cleaned up by DEL.
# Not repeated here: the GID that never appears (104, rollback of link, IPAM, rule and pod-wide
# rp_filter) is test_gid_timeout_fails_104_and_undoes_everything in 10-roce-ipvlan.sh.

FAULT_SUBNET=10.9.70.0/24

# fault_setup POD: a pod whose all.rp_filter is 1 (ADD sets 0, so a leak of that pod-wide
# sysctl shows), and a snapshot of the host in /tmp/host.before
fault_setup() {
	require_plugin
	new_pod "$1"
	in_pod "$1" sysctl -qw net.ipv4.conf.all.rp_filter=1
	host_snapshot >/tmp/host.before
}

# assert_nothing_left POD NET WHAT: after a failed ADD (or the DEL that follows a kill)
assert_nothing_left() {
	local pod=$1 net=$2 what=$3
	if [[ -e /run/netns/$pod ]]; then
		assert_eq "$(pod_links "$pod")" "" "$what: links left in the pod"
		assert_eq "$(pod_rules "$pod")" "" "$what: source rules left in the pod"
		assert_eq "$(in_pod "$pod" sysctl -n net.ipv4.conf.all.rp_filter)" 1 "$what: pod-wide rp_filter"
	fi
	assert_eq "$(host_local_ips "$net")" "" "$what: host-local allocations"
	local diff
	diff=$(host_snapshot | diff /tmp/host.before - || true)
	[[ -z $diff ]] || fail "$what: the host changed: $diff"
}

# fault_add CONF POD CODE ERE WHAT [IFNAME]: direct-exec ADD fails with CODE and a message
# matching ERE, and nothing is left
fault_add() {
	local conf=$1 pod=$2 code=$3 ere=$4 what=$5 ifname=${6:-net1}
	assert_fails cni_exec ADD "$conf" "/run/netns/$pod" "$ifname"
	assert_eq "$(cni_code "$OUT")" "$code" "$what: code (stdout: $OUT)"
	assert_match "$(jq -r .msg <<<"$OUT")" "$ere" "$what: message"
	assert_eq "$(jq -r .cniVersion <<<"$OUT")" "$(jq -r .cniVersion "$conf")" "$what: error's cniVersion"
	assert_nothing_left "$pod" "$(jq -r .name "$conf")" "$what"
	note "$what: $code $(jq -r .msg <<<"$OUT" | cut -c1-110)"
}

# plugin_env CMD NETNS IFNAME CID: run the plugin with exactly these CNI_* variables (an empty
# argument means "not set"); config on stdin
plugin_env() {
	local -a e=(PATH="$PATH")
	[[ -n $1 ]] && e+=(CNI_COMMAND="$1")
	[[ -n $2 ]] && e+=(CNI_NETNS="$2")
	[[ -n $3 ]] && e+=(CNI_IFNAME="$3")
	[[ -n $4 ]] && e+=(CNI_CONTAINERID="$4")
	[[ -n ${5-$CNI_PATH} ]] && e+=(CNI_PATH="${5-$CNI_PATH}")
	env -i "${e[@]}" "$CNI_BIN_DIR/roce-ipvlan"
}

test_fault_rail_missing_down_or_without_rdma() {
	fault_setup frail
	trap 'ip link set rdma3 up; cleanup_pods' EXIT
	roce_conf /tmp/f-miss.conf f-rail nosuch0 1.0.0 "$FAULT_SUBNET"
	fault_add /tmp/f-miss.conf frail 100 'rail "nosuch0".*does not exist' "missing master"
	roce_conf /tmp/f-down.conf f-rail rdma3 1.0.0 "$FAULT_SUBNET"
	ip link set rdma3 down
	host_snapshot >/tmp/host.before
	fault_add /tmp/f-down.conf frail 100 'rail rdma3 is down' "master down"
	ip link set rdma3 up
	host_snapshot >/tmp/host.before
	roce_conf /tmp/f-bare.conf f-rail "${VM_BARE_NICS%% *}" 1.0.0 "$FAULT_SUBNET"
	fault_add /tmp/f-bare.conf frail 101 'has no RDMA port' "master without RDMA device"
	roce_conf /tmp/f-nodev.conf f-rail rdma0 1.0.0 "$FAULT_SUBNET" '{"rdma": {"device": "nosuchrxe"}}'
	fault_add /tmp/f-nodev.conf frail 101 'nosuchrxe.*does not exist' "rdma.device that does not exist"
}

test_fault_ipam_missing_failing_garbage_or_empty() {
	fault_setup fipam
	local mode
	roce_conf /tmp/f-ipam.conf f-ipam rdma0 1.0.0 "$FAULT_SUBNET" '{"ipam": {"type": "no-such-ipam"}}'
	fault_add /tmp/f-ipam.conf fipam 103 'no-such-ipam.*not found in CNI_PATH' "IPAM plugin missing"
	# Each fake allocates in host-local first (except fail), then answers badly: the allocation
	# must be released by the rollback.
	for mode in fail garbage noips; do
		fake_ipam "ipam-$mode" "$mode"
		roce_conf "/tmp/f-$mode.conf" f-ipam rdma0 1.0.0 "$FAULT_SUBNET" \
			"{\"ipam\": {\"type\": \"ipam-$mode\", \"subnet\": \"$FAULT_SUBNET\"}}"
	done
	fault_add /tmp/f-fail.conf fipam 103 'ipam-fail ADD failed \(code 11\): pool exhausted' "IPAM plugin failing"
	fault_add /tmp/f-garbage.conf fipam 103 'not JSON' "IPAM plugin printing garbage"
	fault_add /tmp/f-noips.conf fipam 103 'returned no address' "IPAM result without ips"
	assert_match "$(cat /run/fake-ipam/ipam-garbage.log)" 'DEL' "the rollback ran IPAM DEL after garbage"
}

test_fault_netns_deleted_during_add() {
	fault_setup fkillns
	fake_ipam ipam-killns killns
	roce_conf /tmp/f-killns.conf f-killns rdma1 1.0.0 "$FAULT_SUBNET" \
		"{\"ipam\": {\"type\": \"ipam-killns\", \"subnet\": \"$FAULT_SUBNET\"}}"
	assert_fails cni_exec ADD /tmp/f-killns.conf /run/netns/fkillns
	assert_eq "$(cni_code "$OUT")" 105 "netns deleted during ADD: code (stdout: $OUT)"
	assert_match "$OUT" 'was deleted while ADD ran: expected it to outlive the call;' "message"
	[[ ! -e /run/netns/fkillns ]] || fail "the fake IPAM did not delete the netns"
	assert_nothing_left fkillns f-killns "netns deleted during ADD"
	# DEL of the gone pod is success.
	assert_ok cni_exec DEL /tmp/f-killns.conf /run/netns/fkillns
}

# kill_add_at CONF POD WAIT_CMD: starts ADD in the background, waits until WAIT_CMD succeeds
# (at most 30 s), then SIGKILLs the plugin
kill_add_at() {
	local conf=$1 pod=$2 wait=$3 pid
	CNI_COMMAND=ADD CNI_CONTAINERID=kill-$pod CNI_NETNS=/run/netns/$pod CNI_IFNAME=net1 \
		CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" <"$conf" >/tmp/kill.out 2>&1 &
	pid=$!
	local deadline=$((SECONDS + 60))
	until eval "$wait"; do
		((SECONDS < deadline)) || fail "the ADD never reached the point to kill it at: $(cat /tmp/kill.out)"
		kill -0 "$pid" 2>/dev/null || fail "the ADD ended before the point to kill it at: $(cat /tmp/kill.out)"
		sleep 0.2
	done
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
}

test_fault_kill_during_ipam_then_del() {
	fault_setup fkill1
	fake_ipam ipam-slow slow
	roce_conf /tmp/f-kill1.conf f-kill1 rdma2 1.0.0 "$FAULT_SUBNET" \
		"{\"ipam\": {\"type\": \"ipam-slow\", \"subnet\": \"$FAULT_SUBNET\"}}"
	kill_add_at /tmp/f-kill1.conf fkill1 '[[ -s /run/fake-ipam/ipam-slow.pid ]]'
	# The IPAM plugin dies with the plugin that ran it (parent-death signal), by itself.
	wait_dead "$(cat /run/fake-ipam/ipam-slow.pid)" "the IPAM plugin of the killed ADD"
	assert_eq "$(pod_links fkill1)" "net1 " "killed during IPAM: the child is there"
	[[ -n $(host_local_ips f-kill1) ]] || fail "killed during IPAM: no allocation to clean up"
	assert_ok cni_exec DEL /tmp/f-kill1.conf /run/netns/fkill1 net1 kill-fkill1
	in_pod fkill1 sysctl -qw net.ipv4.conf.all.rp_filter=1 # never set: killed before sysctls
	assert_nothing_left fkill1 f-kill1 "kill during IPAM, then DEL"
}

# An IPAM plugin that has not allocated yet when the runtime kills the plugin must not allocate
# afterwards, behind the DEL's back: it is killed with the plugin (PR_SET_PDEATHSIG).
test_fault_kill_before_ipam_allocates_then_del() {
	fault_setup fkill4
	fake_ipam ipam-late late
	roce_conf /tmp/f-kill4.conf f-kill4 rdma3 1.0.0 "$FAULT_SUBNET" \
		"{\"ipam\": {\"type\": \"ipam-late\", \"subnet\": \"$FAULT_SUBNET\"}}"
	kill_add_at /tmp/f-kill4.conf fkill4 '[[ -s /run/fake-ipam/ipam-late.pid ]]'
	local ipam
	ipam=$(cat /run/fake-ipam/ipam-late.pid)
	wait_dead "$ipam" "the IPAM plugin of the killed ADD"
	assert_ok cni_exec DEL /tmp/f-kill4.conf /run/netns/fkill4 net1 kill-fkill4
	# Were it alive, this would let it allocate now (the FIFO is opened read-write: no block).
	echo go 1<>/run/fake-ipam/ipam-late.go
	in_pod fkill4 sysctl -qw net.ipv4.conf.all.rp_filter=1 # never set: killed before sysctls
	assert_nothing_left fkill4 f-kill4 "kill before IPAM allocated, then DEL"
}

# A hung IPAM plugin is killed at its deadline, with what it started, and what it allocated is
# released by the IPAM DEL of the rollback. First its own limit (timeouts.ipamMs), then the
# ADD's total budget (timeouts.totalMs) cuts it. The limits leave the fake (bash, jq and
# host-local, under TCG) time to reach its hang; that it did is checked (its pid file).
test_fault_ipam_hangs_after_allocating_is_killed_and_released() {
	fault_setup fhang
	fake_ipam ipam-hang hang
	local ipam='{"type": "ipam-hang", "subnet": "'$FAULT_SUBNET'"}' what limits
	for limits in '{"ipamMs": 20000, "totalMs": 120000}' '{"ipamMs": 120000, "totalMs": 25000}'; do
		roce_conf /tmp/f-hang.conf f-hang rdma2 1.0.0 "$FAULT_SUBNET" "{\"ipam\": $ipam, \"timeouts\": $limits}"
		what="IPAM plugin hanging, timeouts $limits"
		rm -f /run/fake-ipam/ipam-hang.{pid,helper}
		# timeout: without a deadline of its own the ADD would wait forever.
		assert_fails timeout 120 bash -c 'source tests/vm/lib.sh; cni_exec ADD /tmp/f-hang.conf /run/netns/fhang'
		((RC != 124)) || fail "$what: the ADD never returned"
		assert_eq "$(cni_code "$OUT")" 103 "$what: code (stdout: $OUT)"
		case $limits in
		*'"totalMs": 25000'*) assert_match "$OUT" 'ipam-hang ADD did not finish within [0-9]+ ms \(what was left of timeouts.totalMs 25000\) and was killed' "$what: message" ;;
		*) assert_match "$OUT" 'ipam-hang ADD did not finish within 20000 ms and was killed.*timeouts' "$what: message" ;;
		esac
		[[ -s /run/fake-ipam/ipam-hang.pid ]] ||
			fail "$what: the fake IPAM was killed before it reached its hang (a host too slow for the limit)"
		wait_dead "$(cat /run/fake-ipam/ipam-hang.pid)" "$what: the IPAM plugin"
		wait_dead "$(cat /run/fake-ipam/ipam-hang.helper)" "$what: the IPAM plugin's helper (same process group)"
		assert_match "$(cat /run/fake-ipam/ipam-hang.log)" 'DEL' "$what: the rollback ran IPAM DEL"
		assert_nothing_left fhang f-hang "$what"
		note "$what: $(jq -r .msg <<<"$OUT" | cut -c1-120)"
	done
}

test_fault_kill_during_gid_wait_then_del() {
	fault_setup fkill2
	local other
	other=$(rail_rdma_dev rdma0)
	roce_conf /tmp/f-kill2.conf f-kill2 rdma1 1.0.0 "$FAULT_SUBNET" \
		"{\"rdma\": {\"device\": \"$other\", \"gidTimeoutMs\": 60000}}"
	# shellcheck disable=SC2016 # kill_add_at evaluates the condition itself, each time it polls
	kill_add_at /tmp/f-kill2.conf fkill2 '[[ -n $(pod_rules fkill2) ]]'
	assert_eq "$(pod_links fkill2)" "net1 " "killed during the GID wait: the child is there"
	[[ -n $(host_local_ips f-kill2) ]] || fail "killed during the GID wait: no allocation"
	assert_eq "$(in_pod fkill2 sysctl -n net.ipv4.conf.all.rp_filter)" 0 "pod-wide rp_filter set before the kill"
	assert_ok cni_exec DEL /tmp/f-kill2.conf /run/netns/fkill2 net1 kill-fkill2
	# DEL does not restore the pod-wide rp_filter, after a kill as after a normal ADD: the old
	# value died with the killed process. It is the pod's own, and goes with the pod.
	assert_eq "$(in_pod fkill2 sysctl -n net.ipv4.conf.all.rp_filter)" 0 "pod-wide rp_filter after DEL"
	in_pod fkill2 sysctl -qw net.ipv4.conf.all.rp_filter=1
	assert_nothing_left fkill2 f-kill2 "kill during the GID wait, then DEL"
}

# SIGKILL after 0 to 1.4 s (an ADD takes about 1-2 s under TCG), across the steps of an ADD that
# succeeds when left alone; each time DEL must leave nothing. Every other round the host has a
# link named like CNI_IFNAME, so ADD takes its temporary-name path (add.rs, create_child), and
# a kill there leaves the child under that name.
test_fault_kill_at_random_points_then_del() {
	fault_setup fkill3
	local i delay pid
	roce_conf /tmp/f-kill3.conf f-kill3 rdma3 1.0.0 "$FAULT_SUBNET"
	modprobe dummy
	for i in $(seq 8); do
		delay=$(printf '%d.%03d' $(((i - 1) * 200 / 1000)) $(((i - 1) * 200 % 1000)))
		((i % 2 == 0)) && ip link add net1 type dummy
		CNI_COMMAND=ADD CNI_CONTAINERID=kill3 CNI_NETNS=/run/netns/fkill3 CNI_IFNAME=net1 \
			CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" </tmp/f-kill3.conf >/tmp/kill3.out 2>&1 &
		pid=$!
		sleep "$delay"
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		note "killed after ${delay}s: links '$(pod_links fkill3)', allocations '$(host_local_ips f-kill3 | tr '\n' ' ')'"
		assert_ok cni_exec DEL /tmp/f-kill3.conf /run/netns/fkill3 net1 kill3
		in_pod fkill3 sysctl -qw net.ipv4.conf.all.rp_filter=1
		if ((i % 2 == 0)); then
			assert_match "$(ip -d link show dev net1)" dummy "round $i: the host's net1"
			ip link del net1
		fi
		assert_nothing_left fkill3 f-kill3 "kill after ${delay}s, then DEL"
	done
}

test_fault_add_twice_keeps_the_first() {
	fault_setup ftwice
	local cidr
	roce_conf /tmp/f-twice.conf f-twice rdma0 1.0.0 "$FAULT_SUBNET"
	assert_ok cni_exec ADD /tmp/f-twice.conf /run/netns/ftwice
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	assert_fails cni_exec ADD /tmp/f-twice.conf /run/netns/ftwice
	assert_eq "$(cni_code "$OUT")" 4 "second ADD: code (stdout: $OUT)"
	assert_match "$OUT" 'already has an interface named net1' "second ADD: message"
	# The first attachment is intact (its own checks, not verify_attachment, whose
	# 'ip rule | grep -q' can die of SIGPIPE under pipefail).
	assert_eq "$(pod_links ftwice)" "net1 " "links after the second ADD"
	assert_match "$(pod_rules ftwice)" "from ${cidr%/*} lookup 1[0-9]{4}" "source rule after the second ADD"
	assert_match "$(in_pod ftwice ip -4 -o addr show dev net1)" "inet ${cidr//./\\.} " "address after the second ADD"
	assert_match "$(in_pod ftwice cat /sys/class/net/net1/ifalias)" "^rdma_dev=$(rail_rdma_dev rdma0) port=1 gid_index=[0-9]+ gid=" "ifalias after the second ADD"
	assert_eq "$(host_local_ips f-twice)" "${cidr%/*}" "one allocation after the second ADD"
	assert_ok cni_exec DEL /tmp/f-twice.conf /run/netns/ftwice
	in_pod ftwice sysctl -qw net.ipv4.conf.all.rp_filter=1 # set by the first ADD, kept by DEL
	assert_nothing_left ftwice f-twice "DEL after a refused second ADD"
}

test_fault_del_without_add_twice_and_without_netns() {
	fault_setup fdel
	local conf=/tmp/f-del.conf cidr
	roce_conf "$conf" f-del rdma1 1.0.0 "$FAULT_SUBNET"
	assert_ok cni_exec DEL "$conf" /run/netns/fdel
	assert_eq "$OUT" "" "DEL without ADD prints nothing"
	assert_ok plugin_env DEL "" net1 cid <"$conf"
	assert_ok plugin_env DEL /run/netns/no-such-pod net1 cid <"$conf"
	: >/tmp/not-a-netns
	assert_ok plugin_env DEL /tmp/not-a-netns net1 cid <"$conf"
	assert_nothing_left fdel f-del "DEL without ADD"
	# DEL twice
	assert_ok cni_exec ADD "$conf" /run/netns/fdel
	assert_ok cni_exec DEL "$conf" /run/netns/fdel
	assert_ok cni_exec DEL "$conf" /run/netns/fdel
	in_pod fdel sysctl -qw net.ipv4.conf.all.rp_filter=1
	assert_nothing_left fdel f-del "DEL twice"
	# DEL with an empty CNI_NETNS still releases the address; the child goes with the pod.
	assert_ok cni_exec ADD "$conf" /run/netns/fdel net1 empty-ns
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	assert_ok plugin_env DEL "" net1 empty-ns <"$conf"
	assert_eq "$(host_local_ips f-del)" "" "DEL with empty CNI_NETNS released ${cidr%/*}"
	ip netns del fdel
	assert_nothing_left fdel f-del "DEL with empty CNI_NETNS, then the pod is gone"
}

# Refusals before anything is changed, many per test: each is a code, a message and no leak.
test_fault_refused_before_any_change() {
	fault_setup fref
	local conf=/tmp/f-ref.conf name v key
	roce_conf "$conf" f-ref rdma0 1.0.0 "$FAULT_SUBNET"
	# CHECK without prevResult
	assert_fails cni_exec CHECK "$conf" /run/netns/fref
	assert_eq "$(cni_code "$OUT")" 7 "CHECK without prevResult (stdout: $OUT)"
	assert_match "$OUT" 'prevResult' "CHECK without prevResult: message"
	# invalid JSON, unsupported cniVersion
	printf '{"cniVersion": "1.0.0", "type": "roce-ipvlan", "name": ' >/tmp/f-bad.json
	assert_fails plugin_env ADD /run/netns/fref net1 cid </tmp/f-bad.json
	assert_match "$(cni_code "$OUT") $OUT" '^6 .*cannot decode' "invalid JSON"
	jq '.cniVersion = "0.2.0"' "$conf" >/tmp/f-ver.conf
	assert_fails cni_exec ADD /tmp/f-ver.conf /run/netns/fref
	assert_eq "$(cni_code "$OUT")" 1 "unsupported cniVersion (stdout: $OUT)"
	assert_match "$OUT" '0\.2\.0' "unsupported cniVersion: message"
	# missing environment variables
	assert_fails plugin_env "" /run/netns/fref net1 cid <"$conf"
	assert_eq "$(cni_code "$OUT")" 4 "no CNI_COMMAND"
	assert_fails plugin_env ADD "" net1 cid <"$conf"
	assert_match "$(cni_code "$OUT") $OUT" '^4 .*CNI_NETNS' "no CNI_NETNS"
	assert_fails plugin_env ADD /run/netns/fref "" cid <"$conf"
	assert_match "$(cni_code "$OUT") $OUT" '^4 .*CNI_IFNAME' "no CNI_IFNAME"
	assert_fails plugin_env ADD /run/netns/fref net1 "" <"$conf"
	assert_match "$(cni_code "$OUT") $OUT" '^4 .*CNI_CONTAINERID' "no CNI_CONTAINERID"
	assert_fails plugin_env ADD /run/netns/fref net1 cid "" <"$conf"
	assert_match "$(cni_code "$OUT") $OUT" '^4 .*CNI_PATH' "no CNI_PATH"
	# netns paths that are not network namespaces
	: >/tmp/not-a-netns
	assert_fails cni_exec ADD "$conf" /tmp/not-a-netns
	assert_match "$(cni_code "$OUT") $OUT" '^105 .*not a namespace' "a regular file as CNI_NETNS"
	assert_fails cni_exec ADD "$conf" /proc/self/ns/mnt
	assert_match "$(cni_code "$OUT") $OUT" '^105 .*not a network namespace' "a mount namespace as CNI_NETNS"
	# interface names
	# '%': the kernel takes the name as a pattern (net%d -> net0), so the child would not be
	# found under CNI_IFNAME and would leak.
	for name in sixteen-chars-xx 'a/b' .. . 'net 1' "$(printf 'net\t1')" all default 'net%d' '%d'; do
		assert_fails cni_exec ADD "$conf" /run/netns/fref "$name"
		assert_match "$(cni_code "$OUT") $OUT" '^4 .*not a valid interface name' "CNI_IFNAME=${name@Q}"
	done
	# IPAM type with a path separator
	for v in '"../host-local"' '"/usr/lib/cni/host-local"' '"x/host-local"'; do
		jq ".ipam.type = $v" "$conf" >/tmp/f-ipamtype.conf
		assert_fails cni_exec ADD /tmp/f-ipamtype.conf /run/netns/fref
		assert_match "$(cni_code "$OUT") $OUT" '^7 .*not a path' "ipam.type $v"
	done
	# sysctl keys outside the attachment's subtree
	for key in kernel.panic net.core.somaxconn net.ipv4.ip_forward net.ipv4.conf.rdma0.rp_filter \
		net.ipv4.conf.lo.arp_ignore 'net.ipv4.conf.IFNAME/../../../kernel/panic' \
		'net.ipv4.conf.IFNAME..arp_ignore' 'net.ipv4.conf.IFNAME.arp_ignore/x' \
		'net.ipv4.conf.IFNAME.arp ignore' 'net.ipv4.neigh.all.gc_thresh1' 'net.ipv4.route.flush'; do
		jq --arg k "$key" '.sysctl = {($k): "1"}' "$conf" >/tmp/f-sysctl.conf
		assert_fails cni_exec ADD /tmp/f-sysctl.conf /run/netns/fref
		assert_match "$(cni_code "$OUT") $OUT" '^7 .*sysctl' "sysctl key ${key@Q}"
	done
	assert_nothing_left fref f-ref "refusals"
}

# A sysctl the kernel does not have, after the pod-wide rp_filter was already written (ADD
# writes them all from one thread): 106, and the pod-wide value is restored with the rest.
test_fault_sysctl_write_fails_after_a_pod_wide_one() {
	fault_setup fsysctl
	local conf=/tmp/f-sysctl-write.conf
	roce_conf /tmp/f-sysctl-base.conf f-sysctl-write rdma1 1.0.0 "$FAULT_SUBNET"
	jq '.sysctl = {"net.ipv4.conf.IFNAME.no_such_key": "1"}' /tmp/f-sysctl-base.conf >"$conf"
	fault_add "$conf" fsysctl 106 'cannot set net\.ipv4\.conf\.net1\.no_such_key' "unknown sysctl key"
}

# stdout and stderr are a pipe whose reader is gone, as for the orphaned plugin of a killed
# Multus: every write fails with EPIPE. An ADD that fails late (at the GID wait, after the
# sysctls and the source rule) must still undo everything, and exit 1, not die of a panic
# (101, or 134 for the release build's abort). Then the same with both closed.
test_fault_add_fails_late_with_broken_stdout_and_stderr() {
	fault_setup fepipe
	local other rc rw w
	other=$(rail_rdma_dev rdma0)
	roce_conf /tmp/f-epipe.conf f-epipe rdma1 1.0.0 "$FAULT_SUBNET" \
		"{\"rdma\": {\"device\": \"$other\", \"gidTimeoutMs\": 1500}, \"logLevel\": \"debug\"}"
	rm -f /tmp/f-epipe.fifo
	mkfifo /tmp/f-epipe.fifo
	# Opened read-write first, so that opening it for writing does not block; then the only
	# reader goes.
	# shellcheck disable=SC2094 # one FIFO, both ends on purpose
	exec {rw}<>/tmp/f-epipe.fifo {w}>/tmp/f-epipe.fifo
	exec {rw}<&-
	rc=0
	CNI_COMMAND=ADD CNI_CONTAINERID=epipe CNI_NETNS=/run/netns/fepipe CNI_IFNAME=net1 \
		CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" </tmp/f-epipe.conf 1>&"$w" 2>&"$w" || rc=$?
	exec {w}>&-
	assert_eq "$rc" 1 "exit status of the ADD with a broken stdout and stderr"
	assert_nothing_left fepipe f-epipe "ADD failing late with a broken stdout and stderr"
	rc=0
	CNI_COMMAND=ADD CNI_CONTAINERID=epipe CNI_NETNS=/run/netns/fepipe CNI_IFNAME=net1 \
		CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" </tmp/f-epipe.conf >&- 2>&- || rc=$?
	assert_eq "$rc" 1 "exit status of the ADD with stdout and stderr closed"
	assert_nothing_left fepipe f-epipe "ADD failing late with stdout and stderr closed"
}

# Under a small pids.max (cgroup v2) thread creation fails with EAGAIN, at different steps for
# different limits. Each ADD either works or fails with a CNI error and leaves nothing; none
# dies of a panic (a thread that cannot be spawned was one, before the undo could run).
test_fault_add_under_a_small_pids_limit() {
	fault_setup fpids
	local cg=/sys/fs/cgroup max conf=/tmp/f-pids.conf refused=0
	[[ -e $cg/cgroup.controllers ]] || mount -t cgroup2 none "$cg"
	grep -qw pids "$cg/cgroup.controllers" || fail "the VM kernel has no pids cgroup controller"
	echo +pids >"$cg/cgroup.subtree_control"
	mkdir -p "$cg/roce-pids"
	trap 'rmdir /sys/fs/cgroup/roce-pids 2>/dev/null; cleanup_pods' EXIT
	roce_conf "$conf" f-pids rdma2 1.0.0 "$FAULT_SUBNET"
	for max in 1 2 3 4 6 8; do
		echo "$max" >"$cg/roce-pids/pids.max"
		# The plugin replaces the shell that moved itself into the cgroup: it is the only
		# process there, and its threads and children count against the limit.
		# shellcheck disable=SC2016 # expanded by the inner shell
		run_cmd bash -c 'echo $BASHPID >/sys/fs/cgroup/roce-pids/cgroup.procs &&
			CNI_COMMAND=ADD CNI_CONTAINERID=pids CNI_NETNS=/run/netns/fpids CNI_IFNAME=net1 \
			exec "$CNI_BIN_DIR/roce-ipvlan"' <"$conf"
		if ((RC == 0)); then
			note "pids.max $max: ADD worked"
			assert_ok cni_exec DEL "$conf" /run/netns/fpids net1 pids
			in_pod fpids sysctl -qw net.ipv4.conf.all.rp_filter=1 # set by the ADD, kept by DEL
		else
			refused=$((refused + 1))
			assert_eq "$RC" 1 "pids.max $max: exit status (stdout: $OUT, stderr: $(tail -c 300 <<<"$ERR"))"
			assert_match "$(cni_code "$OUT")" '^[0-9]+$' "pids.max $max: a CNI error (stdout: $OUT)"
			note "pids.max $max: $(cni_code "$OUT") $(jq -r .msg <<<"$OUT" | cut -c1-110)"
			# The undo of what is in the pod needs no new thread or process...
			assert_eq "$(pod_links fpids)" "" "pids.max $max: links left by the failed ADD"
			assert_eq "$(pod_rules fpids)" "" "pids.max $max: rules left by the failed ADD"
			assert_eq "$(in_pod fpids sysctl -n net.ipv4.conf.all.rp_filter)" 1 "pids.max $max: pod-wide rp_filter"
			# ...but IPAM DEL does (a fork): when the limit forbids it, the runtime's DEL after
			# the failed ADD releases the address.
			assert_ok cni_exec DEL "$conf" /run/netns/fpids net1 pids
		fi
		assert_nothing_left fpids f-pids "ADD under pids.max $max"
	done
	((refused > 0)) || fail "no pids.max made the ADD fail: the test did not test anything"
}
