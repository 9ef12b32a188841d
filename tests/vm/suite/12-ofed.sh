# shellcheck shell=bash
# The bug roce-ipvlan exists for, on a real kernel: the OFED view of the RDMA core
# (VM_RDMA=ofed, tests/vm/ofed/; docs/testing.md "The OFED view") hides every GID whose netdev is
# in another network namespace, as DOCA-OFED's ib_core does
# (/work/shared/background/why-pods-see-zero-roce-gids.txt).
#
# test_ofed_* assert the OFED behaviour and run (by default) only when VM_RDMA=ofed: on the
# kernel's own RDMA core each of the symptom tests fails. test_upstream_* are their upstream
# counterparts, run (by default) only on the upstream view: the same steps succeed there.
# 10.30.x: no other suite file uses it.

OFED_RAIL=rdma0
ZERO_GID=0000:0000:0000:0000:0000:0000:0000:0000

# host_gid_index DEV IPV4 NDEV: the index of the RoCE v2 GID of IPV4 on NDEV, read in the VM's
# initial namespace, once the kernel has added it (from a work item, a little after the address).
host_gid_index() {
	local want f i files
	want=$(gid_of_ipv4 "$2")
	for _ in $(seq 100); do
		mapfile -t files < <(grep -lx "$want" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null)
		for f in "${files[@]}"; do
			i=${f##*/}
			[[ $(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i") == "RoCE v2" ]] || continue
			[[ $(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/$i") == "$3" ]] || continue
			echo "$i"
			return 0
		done
		sleep 0.1
	done
	fail "no RoCE v2 GID for $2 on $1 (host view) after 10 s"
}

# bare_pods A B: two pods with the RDMA devices (shared mode: every netns sees them) and no
# netdev on any rail, joined by a veth pair as their "pod network" (192.168.130.1 and .2) for
# perftest's out-of-band exchange. The rail gets the host address 10.30.0.1/24.
bare_pods() {
	new_pod "$1"
	new_pod "$2"
	ip link add oob-a netns "$1" type veth peer name oob-b netns "$2"
	in_pod "$1" ip addr add 192.168.130.1/30 dev oob-a
	in_pod "$2" ip addr add 192.168.130.2/30 dev oob-b
	in_pod "$1" ip link set oob-a up
	in_pod "$2" ip link set oob-b up
	ip addr add 10.30.0.1/24 dev "$OFED_RAIL"
	HOST_ADDRS+=("10.30.0.1/24 dev $OFED_RAIL")
}
HOST_ADDRS=()
cleanup_host_addrs() {
	local a args
	for a in "${HOST_ADDRS[@]}"; do
		read -r -a args <<<"$a"
		ip addr del "${args[@]}" 2>/dev/null || true
	done
}

# perftest_pair SERVER_POD CLIENT_POD CMD...: run a perftest CMD (e.g. ib_write_bw -d rxe0 -x 1)
# as server in one pod and client in the other; sets OUT to both outputs (server first) and RC
# to 0 when both succeeded, else 1. With -F: under TCG perftest's own clock check (a regression
# of cycles against gettimeofday, r^2 >= 0.9) fails now and then, and without -F it then exits
# 1 after the transfer ("Can't produce a report"), which is not what these tests are about.
perftest_pair() {
	local srv=$1 cli=$2 slog clog spid src=0 crc=0 port=18515
	shift 2
	slog=$(mktemp) clog=$(mktemp)
	in_pod "$srv" timeout 60 "$@" -F -p "$port" >"$slog" 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		in_pod "$srv" ss -ltnH "sport = :$port" | grep . >/dev/null && break
		sleep 0.1
	done
	in_pod "$cli" timeout 60 "$@" -F -p "$port" 192.168.130.1 >"$clog" 2>&1 || crc=$?
	wait "$spid" || src=$?
	OUT="--- server ($srv, exit $src) ---"$'\n'"$(cat "$slog")"$'\n'"--- client ($cli, exit $crc) ---"$'\n'"$(cat "$clog")"
	rm -f "$slog" "$clog"
	RC=$((src != 0 || crc != 0))
}

# The symptom, without roce-ipvlan (issue #15 case 1; the field report's "From a pod with the
# host PFs"): sysfs shows zeros and EINVAL, the query ioctl the real GIDs, and verbs that address
# from the host's GID fail: RC at RTR (ENODEV), UD at create_ah.
test_ofed_symptom_pod_without_netdev() {
	trap 'cleanup_host_addrs; cleanup_pods' EXIT
	local dev idx base gids
	dev=$(rail_rdma_dev "$OFED_RAIL")
	bare_pods ofedsa ofedsb
	idx=$(host_gid_index "$dev" 10.30.0.1 "$OFED_RAIL")
	base=/sys/class/infiniband/$dev/ports/1
	note "host GID of 10.30.0.1 on $dev: index $idx"

	assert_eq "$(in_pod ofedsa cat "$base/gids/$idx")" "$ZERO_GID" "GID $idx (the host's) read in the pod"
	gids=$(in_pod ofedsa cat "$base"/gids/* | sort -u)
	assert_eq "$gids" "$ZERO_GID" "every GID of $dev read in the pod"
	run_cmd in_pod ofedsa cat "$base/gid_attrs/types/$idx"
	assert_eq "$RC" 1 "exit status of reading types/$idx in the pod"
	assert_match "$ERR" "types/$idx: Invalid argument" "types/$idx in the pod"
	run_cmd in_pod ofedsa cat "$base/gid_attrs/ndevs/0"
	assert_match "$ERR" "ndevs/0: Invalid argument" "ndevs/0 (the link-local GID) in the pod"
	assert_ok in_pod ofedsa ibv_devinfo -v -d "$dev"
	assert_match "$OUT" "GID\[ *$idx\]:[[:space:]]+::ffff:10\.30\.0\.1, RoCE v2" "ibv_devinfo -v in the pod (query ioctl)"

	perftest_pair ofedsa ofedsb ib_write_bw -d "$dev" -x "$idx" -n 5 -s 64
	echo "$OUT"
	assert_eq "$RC" 1 "ib_write_bw between the pods fails"
	assert_match "$OUT" "Failed to modify QP [0-9]+ to RTR" "ib_write_bw's error"
	assert_match "$OUT" "Unable to Connect the HCA's through the link" "ib_write_bw's error"
	perftest_pair ofedsa ofedsb ib_send_bw -c UD -d "$dev" -x "$idx" -n 5 -s 64
	echo "$OUT"
	assert_eq "$RC" 1 "ib_send_bw -c UD between the pods fails"
	assert_match "$OUT" "Failed to create AH" "ib_send_bw -c UD's error"
}

# Side by side with the test above: the kernel's own RDMA core shows every GID in every namespace
# and lets the same pods use the host's GID.
test_upstream_symptom_absent_pod_without_netdev() {
	trap 'cleanup_host_addrs; cleanup_pods' EXIT
	local dev idx base
	dev=$(rail_rdma_dev "$OFED_RAIL")
	bare_pods upsa upsb
	idx=$(host_gid_index "$dev" 10.30.0.1 "$OFED_RAIL")
	base=/sys/class/infiniband/$dev/ports/1
	note "host GID of 10.30.0.1 on $dev: index $idx"

	assert_eq "$(in_pod upsa cat "$base/gids/$idx")" "$(gid_of_ipv4 10.30.0.1)" "GID $idx read in the pod"
	assert_eq "$(in_pod upsa cat "$base/gid_attrs/types/$idx")" "RoCE v2" "types/$idx in the pod"
	assert_eq "$(in_pod upsa cat "$base/gid_attrs/ndevs/$idx")" "$OFED_RAIL" "ndevs/$idx in the pod"
	assert_ok in_pod upsa ibv_devinfo -v -d "$dev"
	assert_match "$OUT" "GID\[ *$idx\]:[[:space:]]+::ffff:10\.30\.0\.1, RoCE v2" "ibv_devinfo -v in the pod"

	perftest_pair upsa upsb ib_write_bw -d "$dev" -x "$idx" -n 5 -s 64
	echo "$OUT"
	assert_eq "$RC" 0 "ib_write_bw between the pods"
	perftest_pair upsa upsb ib_send_bw -c UD -d "$dev" -x "$idx" -n 5 -s 64
	echo "$OUT"
	assert_eq "$RC" 0 "ib_send_bw -c UD between the pods"
}

# ofed_attach POD NET RAIL SUBNET [IFNAME]: a roce-ipvlan attachment by a direct plugin call
# (cniVersion 1.1.0, so the raw result keeps "roce"); the raw result is in /tmp/NET.result.
ofed_attach() {
	local ifn=${5:-net1}
	roce_conf "/tmp/$2.conf" "$2" "$3" 1.1.0 "$4"
	assert_ok cni_exec ADD "/tmp/$2.conf" "/run/netns/$1" "$ifn" "$1"
	printf '%s' "$OUT" >"/tmp/$2.result"
}

# Issue #15 case 3: ADD's GID wait must read from inside the pod. On the OFED view the host never
# sees the child's GID (its netdev is in the pod), so a wait from the host would time out.
test_ofed_gid_wait_reads_the_pod_view() {
	require_plugin
	local raw dev idx gid
	new_pod ofedwait
	ofed_attach ofedwait ofed-wait rdma1 10.30.10.0/24
	raw=/tmp/ofed-wait.result
	read -r dev _ idx _ <<<"$(verify_attachment ofedwait net1 rdma1 "$(in_pod ofedwait ip -4 -o addr show dev net1 | awk '{print $4}')" "$raw")"
	gid=$(gid_long "$(jq -r .roce.gid "$raw")")
	assert_eq "$(cat "/sys/class/infiniband/$dev/ports/1/gids/$idx")" "$ZERO_GID" "GID $idx read on the host"
	! grep -lx "$gid" /sys/class/infiniband/"$dev"/ports/1/gids/* >/dev/null 2>&1 ||
		fail "the host view shows the child's GID $gid: this is not the OFED view"
	note "ADD reported $dev GID $idx ($gid): the pod reads it, the host reads zero there"
	assert_ok cni_exec DEL /tmp/ofed-wait.conf /run/netns/ofedwait net1 ofedwait
	assert_eq "$(host_local_ips ofed-wait)" "" "host-local allocations after DEL"
}

# Issue #15 case 4: diagnose names the OFED GID check from what it reads live (zeros in the pod
# where the host view has GIDs), says what to do, and exits 1; with an attachment, healthy.
test_ofed_diagnose_live() {
	require_plugin
	trap 'cleanup_host_addrs; cleanup_pods' EXIT
	local dev json idx
	dev=$(rail_rdma_dev "$OFED_RAIL")
	ip addr add 10.30.20.1/24 dev "$OFED_RAIL"
	HOST_ADDRS+=("10.30.20.1/24 dev $OFED_RAIL")
	idx=$(host_gid_index "$dev" 10.30.20.1 "$OFED_RAIL")
	new_pod ofeddiag
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" diagnose --netns /run/netns/ofeddiag
	assert_eq "$RC" 1 "exit status for a problem"
	assert_match "$OUT" "ib_core: an MLNX_OFED/DOCA-OFED build" "ib_core flavor"
	assert_match "$OUT" "no netdev on rail $OFED_RAIL \($dev port 1\) in this namespace: its GIDs are hidden by the OFED GID check \([0-9]+ slots read zero here but are in use\), so verbs fail \(ibv_modify_qp: ENODEV" "the cause"
	assert_match "$OUT" "gid +$idx +\(zeros\) .* hidden \(host: ::ffff:10\.30\.20\.1 on $OFED_RAIL\)" "the host's GID $idx shown as hidden"
	assert_match "$OUT" "fix: attach a roce-ipvlan network for this rail" "what to do"
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" diagnose --netns /run/netns/ofeddiag --json
	json=$OUT
	jq -e '.report.ibCore.flavor == "ofed"' <<<"$json" >/dev/null || fail "JSON flavor is not ofed"
	jq -e --arg d "$dev" --argjson i "$idx" '.report.ports[] | select(.device == $d) | .gids[]
		| select(.index == $i) | .class == "hidden"' <<<"$json" >/dev/null || fail "JSON: GID $idx is not hidden"
	jq -e '[.report.findings[] | select(.code == "no-netdev-on-any-rail" and .severity == "error")]
		| length == 1' <<<"$json" >/dev/null || fail "JSON: no no-netdev-on-any-rail error"

	ofed_attach ofeddiag ofed-diag "$OFED_RAIL" 10.30.21.0/24
	assert_ok "$CNI_BIN_DIR/roce-ipvlan" diagnose --netns /run/netns/ofeddiag
	assert_match "$OUT" "verdict: healthy" "with an attachment"
	assert_match "$OUT" "net1 \(ipvlan\) on rail $OFED_RAIL \($dev port 1\): RoCE v2 GID index $(jq .roce.gidIndex /tmp/ofed-diag.result)" "net1's GID index"
	assert_ok cni_exec DEL /tmp/ofed-diag.conf /run/netns/ofeddiag net1 ofeddiag
}

# Issue #15 case 5: env in a pod on the OFED view names the children's GIDs (checked against the
# pod's sysfs by 30-env.sh's check_env_json) while the rails' own GIDs read zero there.
test_ofed_env_live() {
	require_plugin
	trap 'cleanup_host_addrs; cleanup_pods' EXIT
	# shellcheck source=tests/vm/suite/30-env.sh
	source "$(dirname "${BASH_SOURCE[0]}")/30-env.sh"
	local json rail i=0 dev hidx
	for rail in rdma0 rdma1; do
		ip addr add "10.30.3$i.1/24" dev "$rail"
		HOST_ADDRS+=("10.30.3$i.1/24 dev $rail")
		i=$((i + 1))
	done
	pod_rails ofedenv ofed-env 10.30.4 rdma0 rdma1
	assert_ok in_pod ofedenv "$CNI_BIN_DIR/roce-ipvlan" env --format json
	json=$OUT
	note "env: $(jq -c .env <<<"$json")"
	check_env_json ofedenv "$json" 2 >/dev/null
	i=0
	for rail in rdma0 rdma1; do
		dev=$(rail_rdma_dev "$rail")
		hidx=$(host_gid_index "$dev" "10.30.3$i.1" "$rail")
		assert_eq "$(in_pod ofedenv cat "/sys/class/infiniband/$dev/ports/1/gids/$hidx")" "$ZERO_GID" \
			"the host's GID $hidx on $dev, read in the pod"
		[[ $(jq -r ".rails[$i].gidIndex" <<<"$json") != "$hidx" ]] || fail "env picked the host's GID on $dev"
		i=$((i + 1))
	done
	for i in 0 1; do
		assert_ok cnidriver del "/tmp/ofed-env-$i.conf" /run/netns/ofedenv --ifname "net$((i + 1))" --container-id ofedenv
	done
}

# set_netns_mode shared|exclusive: the kernel refuses (EBUSY) while a netns other than the
# initial one exists, and deleted ones go away asynchronously: retry for a while.
set_netns_mode() {
	for _ in $(seq 100); do
		rdma system set netns "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	fail "rdma system set netns $1 kept failing (another netns still exists?): $(ip netns list | tr '\n' ' ')"
}

# Issue #15 case 6: in exclusive mode (the report's A100 image) a pod sees no RDMA device, so a
# shared rail cannot serve it: ADD refuses up front with a CNI error that says why and what to
# change, and leaves nothing; diagnose says the same. Exclusive mode is upstream behaviour,
# unchanged by the OFED view: this test fails on either view when ADD does not refuse.
test_ofed_exclusive_mode_refused() {
	require_plugin
	trap 'cleanup_pods; set_netns_mode shared' EXIT
	local before
	set_netns_mode exclusive
	new_pod ofedexcl
	roce_conf /tmp/ofed-excl.conf ofed-excl "$OFED_RAIL" 1.1.0 10.30.50.0/24
	before=$(host_snapshot)
	assert_fails cni_exec ADD /tmp/ofed-excl.conf /run/netns/ofedexcl net1 ofedexcl
	assert_eq "$(cni_code "$OUT")" 101 "CNI error code"
	local msg
	msg=$(jq -r .msg <<<"$OUT")
	note "ADD: $msg"
	assert_match "$msg" "exclusive netns mode" "the error names the mode"
	assert_match "$msg" "pod would see no RDMA device" "the error says why"
	assert_match "$msg" "netns_mode=1" "the error says what to change"
	assert_match "$msg" "rdma system set netns shared" "the error says what to change"
	assert_match "$msg" "SR-IOV VFs with the RDMA CNI" "the error names the alternative"
	assert_eq "$(pod_links ofedexcl)" "" "links left in the pod"
	assert_eq "$(host_local_ips ofed-excl)" "" "host-local allocations"
	assert_eq "$(host_snapshot)" "$before" "host links, rules and sysctls"

	assert_fails "$CNI_BIN_DIR/roce-ipvlan" diagnose --netns /run/netns/ofedexcl
	assert_match "$OUT" "ERROR +exclusive mode and no RDMA device in this namespace" "diagnose's verdict"
	assert_match "$OUT" "netns_mode=1" "diagnose's fix"
	assert_match "$OUT" "SR-IOV VF with the RDMA CNI" "diagnose's alternative"
}
