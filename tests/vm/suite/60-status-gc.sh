# shellcheck shell=bash
# CNI 1.1 STATUS and GC (plugin/src/commands/status.rs, gc.rs), through the libcni driver's status and gc
# verbs (libcni's GetStatusNetworkList and GCNetworkList, as a runtime calls them) and by direct
# exec with nothing but CNI_COMMAND and CNI_PATH, as the spec allows.
# Codes: 50 = cannot serve ADD; 51 = cannot serve ADD and attached pods may have limited
# connectivity (rail down, RDMA port not ACTIVE).

# sg_conf FILE NAME MASTER [EXTRA_JSON]: a cniVersion 1.1.0 roce-ipvlan config with host-local
sg_conf() { roce_conf "$1" "$2" "$3" 1.1.0 10.9.60.0/24 "${4:-{\}}"; }

# bare_exec CMD CONF: the plugin with only CNI_COMMAND and CNI_PATH in its environment
bare_exec() { env -i CNI_COMMAND="$1" CNI_PATH="$CNI_PATH" PATH="$PATH" "$CNI_BIN_DIR/roce-ipvlan" <"$2"; }

# wait_port_state DEV STATE: up to 10 s for RDMA port 1 of DEV to report STATE
wait_port_state() {
	for _ in $(seq 100); do
		[[ $(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null) == *"$2"* ]] && return 0
		sleep 0.1
	done
	fail "port 1 of $1 is '$(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null)', expected $2"
}

test_status_ok_on_a_healthy_rail() {
	require_plugin
	sg_conf /tmp/st-ok.conf st-ok rdma0
	assert_ok cnidriver status /tmp/st-ok.conf
	assert_eq "$OUT" "" "STATUS prints nothing on success"
	assert_ok bare_exec STATUS /tmp/st-ok.conf
	assert_eq "$OUT" "" "STATUS (direct exec, CNI_COMMAND and CNI_PATH only) prints nothing"
	# rdma.device alone names the rail too.
	sg_conf /tmp/st-dev.conf st-dev "" "{\"rdma\": {\"device\": \"$(rail_rdma_dev rdma1)\"}}"
	assert_ok cnidriver status /tmp/st-dev.conf
	# A NAD that leaves the rail to each pod's cni-args has no rail to check: ready.
	sg_conf /tmp/st-none.conf st-none ""
	assert_ok cnidriver status /tmp/st-none.conf
	# host-local (Debian 1.1.1) speaks up to 1.0.0: STATUS is not forwarded, and says so.
	sg_conf /tmp/st-log.conf st-log rdma0 '{"logLevel": "info"}'
	assert_ok bare_exec STATUS /tmp/st-log.conf
	assert_match "$ERR" 'does not speak CNI 1\.1\.0' "log line for an IPAM plugin without STATUS"
}

# A runtime sends STATUS and GC only to 1.1.0 networks: libcni succeeds for an older one
# without running the plugin (which would refuse, so success shows it was not run). The
# plugin's own refusal is for a runtime that sends them anyway: direct exec.
test_status_and_gc_need_cni_1_1() {
	require_plugin
	roce_conf /tmp/st-old.conf st-old rdma0 1.0.0 10.9.60.0/24
	assert_ok cnidriver status /tmp/st-old.conf
	assert_ok cnidriver gc /tmp/st-old.conf
	cp /tmp/st-old.conf /tmp/st-old.STATUS
	jq '. + {"cni.dev/valid-attachments": []}' /tmp/st-old.conf >/tmp/st-old.GC
	for verb in STATUS GC; do
		assert_fails bare_exec "$verb" "/tmp/st-old.$verb"
		assert_eq "$(cni_code "$OUT")" 1 "$verb with cniVersion 1.0.0 (stdout: $OUT)"
		assert_match "$OUT" '1\.1\.0' "$verb error names the version needed"
	done
}

test_status_missing_rail_50() {
	require_plugin
	sg_conf /tmp/st-miss.conf st-miss nosuch0
	assert_fails cnidriver status /tmp/st-miss.conf
	assert_eq "$(cni_code "$OUT")" 50 "STATUS of a missing rail (stdout: $OUT)"
	assert_match "$OUT" 'nosuch0.*does not exist' "message names the rail"
	sg_conf /tmp/st-nodev.conf st-nodev "" '{"rdma": {"device": "nosuchrxe"}}'
	assert_fails cnidriver status /tmp/st-nodev.conf
	assert_eq "$(cni_code "$OUT")" 50 "STATUS of a missing RDMA device (stdout: $OUT)"
}

test_status_rail_without_rdma_50() {
	require_plugin
	sg_conf /tmp/st-bare.conf st-bare "${VM_BARE_NICS%% *}"
	assert_fails cnidriver status /tmp/st-bare.conf
	assert_eq "$(cni_code "$OUT")" 50 "STATUS of a rail without RDMA port (stdout: $OUT)"
	assert_match "$OUT" 'no RDMA port' "message"
}

test_status_rail_down_51() {
	require_plugin
	trap 'ip link set rdma2 up; cleanup_pods' EXIT
	sg_conf /tmp/st-down.conf st-down rdma2
	ip link set rdma2 down
	assert_fails cnidriver status /tmp/st-down.conf
	assert_eq "$(cni_code "$OUT")" 51 "STATUS of a rail that is down (stdout: $OUT)"
	assert_match "$OUT" 'rdma2 is down' "message names the rail"
	ip link set rdma2 up
	wait_port_state "$(rail_rdma_dev rdma2)" ACTIVE
	assert_ok cnidriver status /tmp/st-down.conf
}

# A rail that is up but whose RDMA port is not ACTIVE: a veth whose peer is down has no carrier,
# so Soft-RoCE on it reports its port DOWN while the netdev itself is administratively up.
test_status_port_not_active_51() {
	require_plugin
	trap 'rdma link del rxestv 2>/dev/null; ip link del strail 2>/dev/null; cleanup_pods' EXIT
	ip link add strail type veth peer name strailp
	ip link set strail up
	rdma link add rxestv type rxe netdev strail
	wait_port_state rxestv DOWN
	sg_conf /tmp/st-port.conf st-port strail
	assert_fails cnidriver status /tmp/st-port.conf
	assert_eq "$(cni_code "$OUT")" 51 "STATUS of a port that is not ACTIVE (stdout: $OUT)"
	assert_match "$OUT" 'rxestv 1 of rail strail is .*DOWN.*expected ACTIVE' "message names port and state"
	ip link set strailp up
	wait_port_state rxestv ACTIVE
	assert_ok cnidriver status /tmp/st-port.conf
}

test_status_ipam_missing_50() {
	require_plugin
	sg_conf /tmp/st-noipam.conf st-noipam rdma0 '{"ipam": {"type": "no-such-ipam"}}'
	assert_fails cnidriver status /tmp/st-noipam.conf
	assert_eq "$(cni_code "$OUT")" 50 "STATUS with a missing IPAM plugin (stdout: $OUT)"
	assert_match "$OUT" 'no-such-ipam.*not found in CNI_PATH' "message"
}

test_status_forwarded_to_a_1_1_ipam() {
	require_plugin
	fake_ipam ipam-v11 v11
	sg_conf /tmp/st-fwd.conf st-fwd rdma0 '{"ipam": {"type": "ipam-v11", "subnet": "10.9.61.0/24"}}'
	assert_ok cnidriver status /tmp/st-fwd.conf
	assert_match "$(cat /run/fake-ipam/ipam-v11.log)" 'STATUS' "STATUS reached the IPAM plugin"
	assert_eq "$(jq -r .cniVersion /run/fake-ipam/ipam-v11.STATUS.json)" 1.1.0 "IPAM STATUS cniVersion"
	for code in 50 51; do
		echo "$code" >/run/fake-ipam/ipam-v11.fail
		assert_fails cnidriver status /tmp/st-fwd.conf
		assert_eq "$(cni_code "$OUT")" "$code" "IPAM STATUS failing with $code (stdout: $OUT)"
		assert_match "$OUT" 'fake IPAM is not ready' "IPAM's message passed on"
	done
}

test_gc_forwards_valid_attachments() {
	require_plugin
	fake_ipam ipam-v11 v11
	sg_conf /tmp/gc-fwd.conf gc-fwd rdma0 '{"ipam": {"type": "ipam-v11", "subnet": "10.9.62.0/24"}}'
	assert_ok cnidriver gc /tmp/gc-fwd.conf --valid c1/net1,c2/net2
	assert_eq "$OUT" "" "GC prints nothing on success"
	local got=/run/fake-ipam/ipam-v11.GC.json
	assert_eq "$(jq -c '."cni.dev/valid-attachments"' "$got")" \
		'[{"containerID":"c1","ifname":"net1"},{"containerID":"c2","ifname":"net2"}]' \
		"valid attachments handed to IPAM"
	assert_eq "$(jq -r .cniVersion "$got")" 1.1.0 "IPAM GC cniVersion"
	# An IPAM GC failure is the GC's failure.
	echo 11 >/run/fake-ipam/ipam-v11.fail
	assert_fails cnidriver gc /tmp/gc-fwd.conf --valid c1/net1
	assert_eq "$(cni_code "$OUT")" 103 "GC when IPAM GC fails (stdout: $OUT)"
	# Without the list at all: refused, never read as "nothing is valid".
	rm -f /run/fake-ipam/ipam-v11.fail /run/fake-ipam/ipam-v11.GC.json
	assert_fails bare_exec GC /tmp/gc-fwd.conf
	assert_eq "$(cni_code "$OUT")" 7 "GC without cni.dev/valid-attachments (stdout: $OUT)"
	[[ ! -e $got ]] || fail "GC without a list reached the IPAM plugin"
}

# host-local 1.1.1 has no GC. An attachment libcni's cache holds (ADD through cnidriver) stays
# while GC names it valid; the plugin's own GC does not forward to host-local, so even an empty
# list leaves the allocation; libcni's GC with the attachment left out DELs it first, as a
# runtime's GC of a pod it no longer knows does, and the allocation goes with that DEL.
test_gc_with_host_local() {
	require_plugin
	sg_conf /tmp/gc-hl.conf gc-hl rdma1 '{"logLevel": "info"}'
	new_pod gchl
	assert_ok cnidriver add /tmp/gc-hl.conf /run/netns/gchl --container-id gchl-c
	local ip cached=/var/lib/cni/results/gc-hl-gchl-c-net1
	ip=$(jq -r '.ips[0].address' <<<"$OUT")
	[[ -e $cached ]] || fail "libcni cached no result for the ADD ($cached)"
	assert_ok cnidriver gc /tmp/gc-hl.conf --valid gchl-c/net1
	assert_eq "$(host_local_ips gc-hl)" "${ip%/*}" "host-local allocation after GC naming it valid"
	assert_eq "$(pod_links gchl)" "net1 " "the valid attachment is untouched"
	# The plugin's GC alone (what libcni sends after its DELs), with nothing valid.
	jq '. + {"cni.dev/valid-attachments": []}' /tmp/gc-hl.conf >/tmp/gc-hl.gc
	assert_ok bare_exec GC /tmp/gc-hl.gc
	assert_match "$ERR" 'does not speak CNI 1\.1\.0' "log line for an IPAM plugin without GC"
	assert_eq "$(host_local_ips gc-hl)" "${ip%/*}" "host-local (no GC of its own) keeps it for an empty list"
	assert_eq "$(pod_links gchl)" "net1 " "the plugin's GC leaves the pod's child"
	# The runtime's GC without this attachment: libcni DELs it from its cache.
	assert_ok cnidriver gc /tmp/gc-hl.conf
	assert_eq "$(host_local_ips gc-hl)" "" "host-local allocations after libcni's GC DELed the stale attachment"
	assert_eq "$(pod_links gchl)" "" "the stale attachment's child is gone"
	[[ ! -e $cached ]] || fail "libcni's cache still holds the stale attachment after GC"
	assert_ok cnidriver del /tmp/gc-hl.conf /run/netns/gchl --container-id gchl-c
}
