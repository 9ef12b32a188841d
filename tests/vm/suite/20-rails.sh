# shellcheck shell=bash
# Rail selection (plugin/src/attach/rail.rs): one configuration without "master" serving every rail.
# The rails are virtio-net-pci NICs, so each has a real PCI address, as a ConnectX PF has; the
# rxe devices stand in for mlx5_N. Precedence: args.cni > deviceID > master > rdma.device;
# args.cni only for rails the NAD lists in allowedRails (25-hardening.sh tests the refusals).

# rail_conf FILE NAME SUBNET EXTRA_JSON: a roce-ipvlan config with host-local and no "master"
rail_conf() {
	jq -n --arg name "$2" --arg subnet "$3" --argjson extra "$4" --argjson limits "$VM_TIMEOUTS" \
		'{cniVersion: "1.0.0", name: $name, type: "roce-ipvlan",
		  ipam: {type: "host-local", subnet: $subnet}} + $limits + $extra' >"$1"
}

rail_pci() { # rail_pci NETDEV: the PCI address of the NIC (virtio-net sits one level below it)
	local dev
	dev=$(readlink -f "/sys/class/net/$1/device")
	[[ $(basename "$dev") == virtio* ]] && dev=$(dirname "$dev")
	basename "$dev"
}

cni_code() { jq -r '.code // empty' <<<"$1" 2>/dev/null || true; }

# attach_on CONF POD RAIL: ADD by direct exec, verify the child is on RAIL with its GID, then DEL
# and verify nothing is left.
attach_on() {
	local conf=$1 pod=$2 rail=$3 net cidr info dev port idx table
	net=$(jq -r .name "$conf")
	new_pod "$pod"
	assert_ok cni_exec ADD "$conf" "/run/netns/$pod"
	echo "$OUT" >"$conf.result"
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment "$pod" net1 "$rail" "$cidr" "$conf.result")
	read -r dev port idx table <<<"$info"
	note "$(basename "$conf"): $cidr on $rail -> $dev port $port gid_index $idx"
	jq --slurpfile r "$conf.result" '. + {prevResult: $r[0]}' "$conf" >"$conf.prev"
	assert_ok cni_exec CHECK "$conf.prev" "/run/netns/$pod"
	assert_ok cni_exec DEL "$conf.prev" "/run/netns/$pod"
	verify_gone "$pod" net1 "$net" "${cidr%/*}" "$dev" "$table"
}

# refused CONF POD CODE ERE: ADD fails with CODE, the message matches ERE, nothing is left
refused_add() {
	local conf=$1 pod=$2 code=$3 ere=$4 net
	net=$(jq -r .name "$conf")
	new_pod "$pod"
	assert_fails cni_exec ADD "$conf" "/run/netns/$pod"
	assert_eq "$(cni_code "$OUT")" "$code" "error code (stdout: $OUT)"
	assert_match "$(jq -r .msg <<<"$OUT")" "$ere" "error message"
	assert_eq "$(in_pod "$pod" ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" "lo " \
		"links left in the pod"
	assert_eq "$(host_local_ips "$net")" "" "host-local allocations after the refused ADD"
}

test_rail_device_id_picks_its_rail() {
	require_plugin
	local pci
	pci=$(rail_pci rdma2)
	assert_match "$pci" '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$' "PCI address of rdma2"
	rail_conf /tmp/rail-devid.conf rail-devid 10.9.40.0/24 "{\"deviceID\": \"$pci\"}"
	attach_on /tmp/rail-devid.conf devid rdma2
	# The same NAD, the next device of the resource: another rail.
	pci=$(rail_pci ens1f0np0)
	rail_conf /tmp/rail-devid2.conf rail-devid2 10.9.41.0/24 "{\"deviceID\": \"$pci\"}"
	attach_on /tmp/rail-devid2.conf devid2 ens1f0np0
	# deviceID and master agreeing is fine.
	rail_conf /tmp/rail-devid3.conf rail-devid3 10.9.42.0/24 \
		"{\"deviceID\": \"$pci\", \"master\": \"ens1f0np0\"}"
	attach_on /tmp/rail-devid3.conf devid3 ens1f0np0
}

test_rail_rdma_device_alone_picks_its_rail() {
	require_plugin
	local dev
	dev=$(rail_rdma_dev rdma1)
	rail_conf /tmp/rail-rdma.conf rail-rdma 10.9.43.0/24 "{\"rdma\": {\"device\": \"$dev\"}}"
	attach_on /tmp/rail-rdma.conf rdmadev rdma1
}

test_rail_cni_args_override() {
	require_plugin
	# One shared NAD naming rdma0 and allowing the pods every rdma* rail; the pod's cni-args
	# pick rdma3 instead.
	roce_conf /tmp/rail-args.conf rail-args rdma0 1.0.0 10.9.44.0/24 \
		'{"allowedRails": ["rdma*"], "args": {"cni": {"master": "rdma3"}}}'
	attach_on /tmp/rail-args.conf argsmaster rdma3
	# rdmaDevice in cni-args: the rail is that device's netdev; the NAD's master does not leak in.
	roce_conf /tmp/rail-args2.conf rail-args2 rdma0 1.0.0 10.9.45.0/24 \
		"{\"allowedRails\": [\"rdma*\"], \"args\": {\"cni\": {\"rdmaDevice\": \"$(rail_rdma_dev rdma1)\"}}}"
	attach_on /tmp/rail-args2.conf argsrdma rdma1
	# A NAD without any rail: only cni-args name it.
	rail_conf /tmp/rail-args3.conf rail-args3 10.9.46.0/24 \
		'{"allowedRails": ["rdma2"], "args": {"cni": {"master": "rdma2"}}}'
	attach_on /tmp/rail-args3.conf argsonly rdma2
}

test_rail_counter_device_id_refused_code_7() {
	require_plugin
	rail_conf /tmp/rail-counter.conf rail-counter 10.9.47.0/24 '{"deviceID": "3"}'
	refused_add /tmp/rail-counter.conf counter 7 'is a counter, not a PCI address.*RDMA shared device plugin'
}

test_rail_conflicting_inputs_refused_code_7() {
	require_plugin
	local pci
	pci=$(rail_pci rdma2)
	rail_conf /tmp/rail-c1.conf rail-c1 10.9.48.0/24 "{\"deviceID\": \"$pci\", \"master\": \"rdma1\"}"
	refused_add /tmp/rail-c1.conf conflict1 7 "conflicting rails: \"deviceID\" $pci is rail rdma2, but \"master\" rdma1"
	rail_conf /tmp/rail-c2.conf rail-c2 10.9.48.0/24 \
		"{\"deviceID\": \"$pci\", \"allowedRails\": [\"rdma*\"], \"args\": {\"cni\": {\"master\": \"rdma1\"}}}"
	refused_add /tmp/rail-c2.conf conflict2 7 "conflicting rails: .*\"args.cni.master\" rdma1"
	rail_conf /tmp/rail-c3.conf rail-c3 10.9.48.0/24 \
		"{\"deviceID\": \"$pci\", \"rdma\": {\"device\": \"$(rail_rdma_dev rdma0)\"}}"
	refused_add /tmp/rail-c3.conf conflict3 7 "conflicting rails: .*\"rdma.device\" $(rail_rdma_dev rdma0)"
	rail_conf /tmp/rail-none.conf rail-none 10.9.48.0/24 '{}'
	refused_add /tmp/rail-none.conf norail 7 'no rail named'
	# A PCI address that is not on this node is "rail missing" (100).
	rail_conf /tmp/rail-nopci.conf rail-nopci 10.9.48.0/24 '{"deviceID": "0000:7f:1f.7"}'
	refused_add /tmp/rail-nopci.conf nopci 100 'found none at /sys/bus/pci/devices/0000:7f:1f.7'
}

# IPv6 addresses from IPAM on two rails with the same routes (the IPv4 standard): each address
# gets its source rule, and its connected and IPAM routes go into its own child's table. In main,
# the second rail's route collided with the first's (EEXIST). CHECK then notices a route
# deleted from a child's table, and a prevResult whose MAC or sandbox is not the child's.
test_ipv6_ipam_two_rails_same_routes_and_check() {
	require_plugin
	local n addr table routes
	local -a tables
	new_pod v6two
	for n in 1 2; do
		jq -n --arg rail "rdma$n" --argjson limits "$VM_TIMEOUTS" '{cniVersion: "1.0.0", name: "v6two",
			type: "roce-ipvlan", master: $rail,
			ipam: {type: "host-local", ranges: [[{subnet: "fd00:41::/64"}]],
				routes: [{dst: "fd00:99::/64", gw: "fd00:41::1"}]}} + $limits' >"/tmp/v6two.$n.conf"
		assert_ok cni_exec ADD "/tmp/v6two.$n.conf" /run/netns/v6two "net$n" v6two
		echo "$OUT" >"/tmp/v6two.$n.result"
		jq --slurpfile r "/tmp/v6two.$n.result" '. + {prevResult: $r[0]}' "/tmp/v6two.$n.conf" >"/tmp/v6two.$n.prev"
		addr=$(jq -r '.ips[0].address' <<<"$OUT")
		addr=${addr%/*}
		table=$((10000 + $(in_pod v6two cat "/sys/class/net/net$n/ifindex")))
		tables[n]=$table
		in_pod v6two ip -6 rule show | grep -E "^1000:[[:space:]]+from $addr lookup ${table}[[:space:]]*$" >/dev/null ||
			fail "no rule 'from $addr lookup $table': $(in_pod v6two ip -6 rule show | tr '\n' ';')"
		routes=$(in_pod v6two ip -6 route show table "$table")
		assert_match "$routes" "fd00:99::/64 via fd00:41::1 dev net$n " "net$n: the IPAM route in table $table"
		assert_match "$routes" "fd00:41::/64 dev net$n " "net$n: the connected route in table $table"
		note "net$n: $addr, table $table: $(tr '\n' ';' <<<"$routes")"
	done
	assert_no_match "$(in_pod v6two ip -6 route show table main)" 'fd00:99::' "IPAM routes in main"
	for n in 1 2; do
		assert_ok cni_exec CHECK "/tmp/v6two.$n.prev" /run/netns/v6two "net$n" v6two
	done
	# A route deleted from net1's table
	in_pod v6two ip -6 route del fd00:99::/64 table "${tables[1]}"
	assert_fails cni_exec CHECK /tmp/v6two.1.prev /run/netns/v6two net1 v6two
	assert_eq "$(cni_code "$OUT")" 107 "CHECK after the route was deleted (stdout: $OUT)"
	assert_match "$OUT" "expected a route to fd00:99::/64 in table ${tables[1]}" "CHECK names the route"
	# A prevResult whose MAC, or sandbox, is not net2's
	jq '.prevResult.interfaces[0].mac = "02:00:00:00:00:01"' /tmp/v6two.2.prev >/tmp/v6two.mac
	assert_fails cni_exec CHECK /tmp/v6two.mac /run/netns/v6two net2 v6two
	assert_match "$(cni_code "$OUT") $OUT" '^107 .*expected MAC 02:00:00:00:00:01' "CHECK with another MAC"
	jq '.prevResult.interfaces[0].sandbox = "/run/netns/other"' /tmp/v6two.2.prev >/tmp/v6two.sandbox
	assert_fails cni_exec CHECK /tmp/v6two.sandbox /run/netns/v6two net2 v6two
	assert_match "$(cni_code "$OUT") $OUT" '^107 .*sandbox.*/run/netns/other' "CHECK with another sandbox"
	for n in 1 2; do
		assert_ok cni_exec DEL "/tmp/v6two.$n.prev" /run/netns/v6two "net$n" v6two
	done
	assert_eq "$(pod_rules v6two)" "" "source rules after DEL"
	assert_eq "$(compgen -G '/var/lib/cni/networks/v6two/*:*' || true)" "" "host-local allocations after DEL"
}
