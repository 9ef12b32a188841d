# shellcheck shell=bash
# Hardening, round 2 (issue 25) on a real kernel: device-info files that are not this
# attachment's, DEL with a malformed CNI_ARGS, a huge sysctl map, a rail chosen through an
# altname.

# pci_of NETDEV: the PCI address of a rail (virtio-net: the netdev's device is virtioN, whose
# parent is the PCI function).
pci_of() {
	local pci
	pci=$(readlink -f "/sys/class/net/$1/device")
	[[ ${pci##*/} != virtio* ]] || pci=${pci%/*}
	echo "${pci##*/}"
}

# A NAD may carry its own runtimeConfig.CNIDeviceInfoFile (Multus replaces it only for a declared
# capability): naming a device plugin's file (dp/, names anyone can predict) or another pod's
# file under cni/ must leave that file as it was, at ADD (refused, 7, before any change) and at
# DEL (ignored; DEL still succeeds and releases the address).
test_device_info_of_others_left_alone() {
	require_plugin
	local pci dir=/var/run/k8s.cni.cncf.io/devinfo dp other own conf=/tmp/devother.conf
	local target before doc n=0
	pci=$(pci_of rdma2)
	dp="$dir/dp/rdma-shared_rdma2-$pci-device.json"
	other="$dir/cni/tenant-b-rail-0123456789abcdef_net1"
	mkdir -p "$dir/dp" "$dir/cni"
	doc=$(jq -cn --arg pci "$pci" '{type: "pci", version: "1.1.0", pci: {"pci-address": $pci}}')
	for target in "$dp" "$other"; do
		n=$((n + 1))
		echo "$doc" >"$target"
		before=$(stat -c '%i %s %Y' "$target"; cat "$target")
		roce_conf "$conf" devother rdma2 1.0.0 10.9.150.0/24 \
			"$(jq -n --arg pci "$pci" --arg f "$target" '{deviceID: $pci, runtimeConfig: {CNIDeviceInfoFile: $f}}')"
		new_pod "devother$n"
		assert_fails cni_exec ADD "$conf" "/run/netns/devother$n"
		assert_eq "$(cni_code "$OUT")" 7 "ADD naming $target (stdout: $OUT)"
		assert_match "$OUT" "not this attachment's file|per-attachment directory" "ADD message for $target"
		assert_eq "$(pod_links "devother$n")" "" "links in the pod after the refused ADD"
		assert_eq "$(host_local_ips devother)" "" "host-local allocations after the refused ADD"
		assert_eq "$(stat -c '%i %s %Y' "$target"; cat "$target")" "$before" "$target after ADD"
		# DEL of an attachment made without the foreign path, asked with it.
		jq 'del(.runtimeConfig)' "$conf" >"$conf.own"
		assert_ok cni_exec ADD "$conf.own" "/run/netns/devother$n"
		assert_ok cni_exec DEL "$conf" "/run/netns/devother$n"
		assert_eq "$(stat -c '%i %s %Y' "$target"; cat "$target")" "$before" "$target after DEL"
		assert_eq "$(pod_links "devother$n")" "" "links in the pod after DEL"
		assert_eq "$(host_local_ips devother)" "" "host-local allocations after DEL"
		rm -f "$target"
		note "$target: ADD refused (7), DEL succeeded, the file left as it was"
	done
	# This attachment's own file, as Multus names it (<network>-<container id>_<ifname>, the
	# network "<namespace>/<NAD>" with '/' as '-'), is written and removed.
	own="$dir/cni/default-devother-direct-devother1_net1"
	roce_conf "$conf" devother rdma2 1.0.0 10.9.150.0/24 \
		"$(jq -n --arg pci "$pci" --arg f "$own" '{deviceID: $pci, runtimeConfig: {CNIDeviceInfoFile: $f}}')"
	assert_ok cni_exec ADD "$conf" /run/netns/devother1
	assert_eq "$(jq -r '.pci."rdma-device"' "$own")" "$(rail_rdma_dev rdma2)" "own device-info file"
	assert_ok cni_exec DEL "$conf" /run/netns/devother1
	[[ ! -e $own ]] || fail "own device-info file still there after DEL"
}

# DEL tolerates a malformed CNI_ARGS (the reference plugins do not parse it at DEL): the child
# goes and the address is released, host-local getting only the well-formed entries.
test_del_with_malformed_cni_args() {
	require_plugin
	local conf=/tmp/badargs.conf cidr info dev table
	roce_conf "$conf" badargs rdma1 1.0.0 10.9.151.0/24
	new_pod badargs
	assert_ok cni_exec ADD "$conf" /run/netns/badargs
	cidr=$(jq -r '.ips[0].address' <<<"$OUT")
	info=$(verify_attachment badargs net1 rdma1 "$cidr")
	read -r dev _ _ table <<<"$info"
	CNI_ARGS='garbage' assert_fails cni_exec CHECK "$conf" /run/netns/badargs
	assert_eq "$(cni_code "$OUT")" 4 "CHECK with CNI_ARGS=garbage (stdout: $OUT)"
	CNI_ARGS='IgnoreUnknown=1;garbage' assert_ok cni_exec DEL "$conf" /run/netns/badargs
	verify_gone badargs net1 badargs "${cidr%/*}" "$dev" "$table"
	assert_eq "$(host_local_ips badargs)" "" "host-local allocations after DEL"
	note "DEL with CNI_ARGS 'IgnoreUnknown=1;garbage': child gone, ${cidr%/*} released"
}

# plugin_alone COMMAND CONF: the plugin with the CNI environment, CONF on stdin.
plugin_alone() {
	CNI_COMMAND=$1 CNI_CONTAINERID=bigsysctl CNI_NETNS=/run/netns/bigsysctl CNI_IFNAME=net1 \
		CNI_PATH=$CNI_PATH "$CNI_BIN_DIR/roce-ipvlan" <"$2"
}

# A NAD of about 1.4 MB with 40,000 sysctl keys (under the API server's object limit) kept ADD
# and CHECK busy for more than a minute each (quadratic duplicate checks): now refused with the
# cap's message, quickly, before any change. The bound asserted is generous (the VM is emulated
# and shares its cores); the measured time is printed.
test_huge_sysctl_map_refused_quickly() {
	require_plugin
	local conf=/tmp/bigsysctl.conf start ms
	roce_conf "$conf.base" bigsysctl rdma1 1.0.0 10.9.152.0/24
	jq -c '. + {sysctl: ([range(40000)] | map({key: "net.ipv4.conf.IFNAME.k\(.)", value: "1"}) | from_entries)}' \
		"$conf.base" >"$conf"
	note "configuration: $(stat -c %s "$conf") bytes, $(jq '.sysctl | length' "$conf") keys"
	new_pod bigsysctl
	# The plugin alone (cni_exec would add jq reading the 1.35 MB file), and for scale the same
	# command refusing a small configuration (an unknown type): the emulated VM's own cost.
	jq '. + {type: "not-this-plugin"}' "$conf.base" >"$conf.small"
	for cmd in ADD CHECK; do
		start=$(date +%s%N)
		plugin_alone "$cmd" "$conf.small" || true
		base=$((($(date +%s%N) - start) / 1000000))
		start=$(date +%s%N)
		assert_fails plugin_alone "$cmd" "$conf"
		ms=$((($(date +%s%N) - start) / 1000000))
		assert_eq "$(cni_code "$OUT")" 7 "$cmd with 40000 sysctl keys (stdout: ${OUT:0:300})"
		assert_match "$OUT" 'at most [0-9]+ sysctl keys' "$cmd message"
		((ms < 20000)) || fail "$cmd took $ms ms with 40000 sysctl keys"
		note "$cmd: refused (7) in $ms ms (a small configuration refused: $base ms)"
	done
	assert_eq "$(pod_links bigsysctl)" "" "links in the pod"
	assert_eq "$(host_local_ips bigsysctl)" "" "host-local allocations"
	start=$(date +%s%N)
	assert_fails "$CNI_BIN_DIR/roce-ipvlan" validate "$conf"
	ms=$((($(date +%s%N) - start) / 1000000))
	assert_match "$OUT$ERR" 'at most [0-9]+ sysctl keys' "validate's message"
	((ms < 20000)) || fail "validate took $ms ms with 40000 sysctl keys"
	note "validate: refused in $ms ms"
}

# A lookup by name also matches altnames (kernel >= 5.5): cni-args naming a NIC outside
# allowedRails through an altname that matches it must be refused (7) with nothing left, the
# resolved link's own name being what allowedRails is checked against.
test_allowed_rails_through_an_altname() {
	require_plugin
	local base=/tmp/altname.conf conf=/tmp/altname-case.conf before
	ip link property del dev ens1f0np0 altname rdma9x 2>/dev/null || true
	ip link property add dev ens1f0np0 altname rdma9x
	jq -n '{cniVersion: "1.0.0", name: "altname", type: "roce-ipvlan", allowedRails: ["rdma*"],
		ipam: {type: "host-local", subnet: "10.9.153.0/24"}}' >"$base"
	jq '. + {args: {cni: {master: "rdma9x"}}}' "$base" >"$conf"
	new_pod altname
	before=$(host_snapshot)
	trap 'ip link property del dev ens1f0np0 altname rdma9x 2>/dev/null || true; cleanup_pods' EXIT
	assert_fails cnidriver add "$conf" /run/netns/altname
	assert_eq "$(cni_code "$OUT")" 7 "cni-args master rdma9x (stdout: $OUT)"
	assert_match "$OUT" 'ens1f0np0' "the message names the NIC"
	assert_eq "$(pod_links altname)" "" "links in the pod"
	assert_eq "$(host_local_ips altname)" "" "host-local allocations"
	assert_eq "$(host_snapshot)" "$before" "the host"
	# The NAD's own master may be an altname (the NAD's owner chose the rail): attached on the
	# NIC it names.
	jq 'del(.allowedRails) + {master: "rdma9x"}' "$base" >"$conf"
	assert_ok cnidriver add "$conf" /run/netns/altname
	assert_eq "$(in_pod altname cat /sys/class/net/net1/iflink)" "$(cat /sys/class/net/ens1f0np0/ifindex)" \
		"the child's lower device is ens1f0np0"
	assert_ok cnidriver del "$conf" /run/netns/altname
	assert_eq "$(host_local_ips altname)" "" "host-local allocations after DEL"
}
