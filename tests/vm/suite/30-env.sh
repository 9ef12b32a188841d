# shellcheck shell=bash
# `roce-ipvlan env` inside a pod (docs/workload-env.md), and Multus device-info at ADD/DEL.
# Every value env prints is checked against sysfs read inside the pod.

env_bin() { echo "$CNI_BIN_DIR/roce-ipvlan"; }

# pod_rails POD NAME PFX RAIL...: one attachment per rail (net1, net2, …); the n-th rail
# (0-based) gets subnet <PFX><n>.0/24, e.g. PFX 10.10.4 -> 10.10.40.0/24, 10.10.41.0/24. (10.10.x: no
# other suite file uses it, so a namespace still being torn down never holds the same address.)
pod_rails() {
	local pod=$1 name=$2 pfx=$3 i=0 rail
	shift 3
	new_pod "$pod"
	for rail in "$@"; do
		roce_conf "/tmp/$name-$i.conf" "$name-$i" "$rail" 1.0.0 "$pfx$i.0/24"
		assert_ok cnidriver add "/tmp/$name-$i.conf" "/run/netns/$pod" --ifname "net$((i + 1))" --container-id "$pod"
		i=$((i + 1))
	done
}

# alias_field POD IFNAME KEY: a field of the child's ifalias
alias_field() {
	local kv
	for kv in $(in_pod "$1" cat "/sys/class/net/$2/ifalias"); do
		[[ $kv == "$3="* ]] && echo "${kv#*=}" && return 0
	done
	return 1
}

rail_of() { # rail_of POD IFNAME: the host netdev under the pod's IPvlan child
	local f want
	want=$(in_pod "$1" cat "/sys/class/net/$2/iflink")
	for f in /sys/class/net/*/ifindex; do
		[[ $(cat "$f") == "$want" ]] && basename "$(dirname "$f")" && return 0
	done
	return 1
}

# check_env_json POD JSON N: the rails in JSON are the pod's net1..netN, each as sysfs says
# inside the pod; HCA lists and GID settings follow. Prints "same" or "differ".
check_env_json() {
	local pod=$1 json=$2 n=$3 i ifn dev port idx gid base hcas=() first same=1
	assert_eq "$(jq '.rails | length' <<<"$json")" "$n" "number of rails"
	for ((i = 0; i < n; i++)); do
		ifn=net$((i + 1))
		assert_eq "$(jq -r ".rails[$i].interface" <<<"$json")" "$ifn" "rail $i interface"
		dev=$(jq -r ".rails[$i].rdmaDevice" <<<"$json")
		port=$(jq -r ".rails[$i].port" <<<"$json")
		idx=$(jq -r ".rails[$i].gidIndex" <<<"$json")
		gid=$(jq -r ".rails[$i].gid" <<<"$json")
		assert_eq "$dev" "$(alias_field "$pod" "$ifn" rdma_dev)" "$ifn rdmaDevice"
		assert_eq "$dev" "$(rail_rdma_dev "$(rail_of "$pod" "$ifn")")" "$ifn rdmaDevice is its rail's"
		base=/sys/class/infiniband/$dev/ports/$port
		assert_eq "$(in_pod "$pod" cat "$base/gids/$idx")" "$(gid_long "$gid")" "$ifn GID at $dev/$port/$idx (pod view)"
		assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/types/$idx")" "RoCE v2" "$ifn GID type"
		assert_eq "$(in_pod "$pod" cat "$base/gid_attrs/ndevs/$idx")" "$ifn" "$ifn GID ndev"
		hcas+=("$dev:$port")
		first=${first:-$idx}
		[[ $idx == "$first" ]] || same=0
	done
	local list
	list=$(
		IFS=,
		echo "${hcas[*]}"
	)
	assert_eq "$(jq -r .env.NCCL_IB_HCA <<<"$json")" "=$list" NCCL_IB_HCA
	assert_eq "$(jq -r .env.UCX_NET_DEVICES <<<"$json")" "$list" UCX_NET_DEVICES
	if ((same)); then
		assert_eq "$(jq -r .sameGidIndex <<<"$json")" true sameGidIndex
		assert_eq "$(jq -r .env.NCCL_IB_GID_INDEX <<<"$json")" "$first" NCCL_IB_GID_INDEX
		assert_eq "$(jq -r .env.UCX_IB_GID_INDEX <<<"$json")" "$first" UCX_IB_GID_INDEX
		assert_eq "$(jq -r '.env.UCX_IB_ROCE_SUBNETS // "unset"' <<<"$json")" unset "no UCX_IB_ROCE_SUBNETS"
		echo same
	else
		assert_eq "$(jq -r .sameGidIndex <<<"$json")" false sameGidIndex
		assert_eq "$(jq -r '.env.NCCL_IB_GID_INDEX // "unset"' <<<"$json")" unset "no NCCL_IB_GID_INDEX"
		assert_eq "$(jq -r '.env.UCX_IB_GID_INDEX // "unset"' <<<"$json")" unset "no UCX_IB_GID_INDEX"
		assert_eq "$(jq -r '.unset | index("NCCL_IB_GID_INDEX") != null' <<<"$json")" true "unsets NCCL_IB_GID_INDEX"
		echo differ
	fi
}

# nccl_auto_pick POD DEV PORT FAMILY RANGE: NCCL's automatic choice (2.21.5+, docs/workload-env.md)
# re-implemented over the pod's sysfs: the first valid RoCE v2 GID of FAMILY inside RANGE.
nccl_auto_pick() {
	local base=/sys/class/infiniband/$2/ports/$3
	in_pod "$1" python3 - "$base" "$4" "$5" <<-'EOF'
		import ipaddress, os, sys
		base, fam, rng = sys.argv[1], sys.argv[2], sys.argv[3]
		net = ipaddress.ip_network(rng) if rng else None
		for i in sorted(int(x) for x in os.listdir(base + "/gids")):
		    g = ipaddress.IPv6Address(open(f"{base}/gids/{i}").read().strip())
		    try:
		        t = open(f"{base}/gid_attrs/types/{i}").read().strip()
		    except OSError:
		        continue
		    v4 = g.ipv4_mapped
		    if t != "RoCE v2" or g.is_unspecified or g.is_link_local:
		        continue
		    if (fam == "AF_INET") != (v4 is not None):
		        continue
		    addr = v4 if v4 is not None else g
		    if net is None or addr in net:
		        print(i)
		        break
	EOF
}

test_env_no_rails_fails() {
	require_plugin
	new_pod envnone
	run_cmd in_pod envnone "$(env_bin)" env
	assert_eq "$RC" 1 "exit status without rails"
	assert_match "$ERR" "no roce-ipvlan rails" "message without rails"
	run_cmd in_pod envnone "$(env_bin)" env --format yaml
	assert_eq "$RC" 2 "exit status of a usage error"
}

test_env_four_ipv4_rails() {
	require_plugin
	local json shell conf mode
	pod_rails envpod4 env4 10.10.4 rdma0 rdma1 rdma2 rdma3
	assert_ok in_pod envpod4 "$(env_bin)" env --format json
	json=$OUT
	mode=$(check_env_json envpod4 "$json" 4)
	note "4 rails, GID indexes: $(jq -c '[.rails[].gidIndex]' <<<"$json") ($mode)"

	# shell (the default) and nccl-conf print the same settings.
	assert_ok in_pod envpod4 "$(env_bin)" env
	shell=$OUT
	local k v
	while IFS= read -r k; do
		v=$(jq -r --arg k "$k" '.env[$k]' <<<"$json")
		assert_eq "$(NCCL_IB_GID_INDEX=junk UCX_IB_ROCE_SUBNETS=junk bash -c "eval \"\$1\"; printenv $k" _ "$shell")" "$v" "shell $k"
	done < <(jq -r '.env | keys[]' <<<"$json")
	for k in $(jq -r '.unset[]' <<<"$json"); do
		assert_eq "$(NCCL_IB_GID_INDEX=junk UCX_IB_ROCE_SUBNETS=junk bash -c "eval \"\$1\"; printenv $k || echo unset" _ "$shell")" unset "shell unsets $k"
	done
	assert_ok in_pod envpod4 "$(env_bin)" env --format nccl-conf
	conf=$OUT
	grep -qxF "NCCL_IB_HCA=$(jq -r .env.NCCL_IB_HCA <<<"$json")" <<<"$conf" ||
		fail "nccl-conf has no NCCL_IB_HCA line: $conf"
	# Comment lines may name UCX settings (when indexes differ they say which to avoid).
	assert_no_match "$(grep -v '^#' <<<"$conf")" "UCX_" "nccl-conf has NCCL keys only"
}

# Rail rdma1 gets two host addresses first, so the pod's GID there sits two slots higher than
# on rdma0: env must steer NCCL and UCX instead of printing one GID index.
test_env_differing_gid_indexes() {
	require_plugin
	local json shell i ifn dev port idx range fam shell_out
	trap 'ip addr del 192.168.77.1/32 dev rdma1 2>/dev/null; ip addr del 192.168.77.2/32 dev rdma1 2>/dev/null; cleanup_pods' EXIT
	ip addr add 192.168.77.1/32 dev rdma1
	ip addr add 192.168.77.2/32 dev rdma1
	pod_rails envdiff envd 10.10.5 rdma0 rdma1
	assert_ok in_pod envdiff "$(env_bin)" env --format json
	json=$OUT
	assert_eq "$(check_env_json envdiff "$json" 2)" differ "GID indexes differ"
	fam=$(jq -r .env.NCCL_IB_ADDR_FAMILY <<<"$json")
	range=$(jq -r '.env.NCCL_IB_ADDR_RANGE // ""' <<<"$json")
	assert_eq "$fam" AF_INET NCCL_IB_ADDR_FAMILY
	assert_eq "$range" 10.10.50.0/23 NCCL_IB_ADDR_RANGE
	assert_eq "$(jq -r .env.NCCL_IB_ROCE_VERSION_NUM <<<"$json")" 2 NCCL_IB_ROCE_VERSION_NUM
	local subnets=()
	for i in 0 1; do
		ifn=net$((i + 1))
		dev=$(jq -r ".rails[$i].rdmaDevice" <<<"$json")
		port=$(jq -r ".rails[$i].port" <<<"$json")
		idx=$(jq -r ".rails[$i].gidIndex" <<<"$json")
		subnets+=("$(in_pod envdiff ip -4 -o addr show dev "$ifn" | awk '{split($4, a, "/"); print a[1]}')/32")
		assert_eq "$(nccl_auto_pick envdiff "$dev" "$port" "$fam" "$range")" "$idx" \
			"NCCL's own pick on $ifn ($dev) with the printed family/range"
		note "$ifn: $dev/$port gid_index $idx"
	done
	assert_eq "$(jq -r .env.UCX_IB_ROCE_SUBNETS <<<"$json")" "$(
		IFS=,
		echo "${subnets[*]}"
	)" UCX_IB_ROCE_SUBNETS
	# Without the range NCCL would take a host GID on rdma1: the range is what makes it right.
	idx=$(nccl_auto_pick envdiff "$(jq -r '.rails[1].rdmaDevice' <<<"$json")" 1 AF_INET '')
	[[ $idx != "$(jq -r '.rails[1].gidIndex' <<<"$json")" ]] ||
		fail "without NCCL_IB_ADDR_RANGE NCCL would still pick the pod's GID on net2 (index $idx)"

	assert_ok in_pod envdiff "$(env_bin)" env
	shell=$OUT
	shell_out=$(NCCL_IB_GID_INDEX=3 UCX_IB_GID_INDEX=3 bash -c 'eval "$1"; echo "${NCCL_IB_GID_INDEX-unset} ${UCX_IB_GID_INDEX-unset} $UCX_IB_ROCE_SUBNETS"' _ "$shell")
	assert_eq "$shell_out" "unset unset $(jq -r .env.UCX_IB_ROCE_SUBNETS <<<"$json")" "eval of the shell output"
}

test_env_stale_gid_fails() {
	require_plugin
	pod_rails envstale envs 10.10.6 rdma2
	assert_ok in_pod envstale "$(env_bin)" env
	in_pod envstale ip addr flush dev net1
	run_cmd in_pod envstale "$(env_bin)" env --format json
	assert_eq "$RC" 1 "exit status with the GID gone"
	assert_eq "$OUT" "" "no settings printed"
	assert_match "$ERR" "rail net1 \(rxe[0-9]+ port 1\)" "the message names the rail"
}

test_env_device_info_written_and_removed() {
	require_plugin
	# The name Multus gives the file: <network>-<container id>_<ifname> (cni_exec's id).
	local pci dev file=/var/run/k8s.cni.cncf.io/devinfo/cni/envdi-direct-envdi_net1 doc
	# virtio-net: the netdev's device is virtioN, whose parent is the PCI function.
	pci=$(readlink -f /sys/class/net/rdma2/device)
	[[ ${pci##*/} != virtio* ]] || pci=${pci%/*}
	pci=${pci##*/}
	assert_match "$pci" '^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$' "PCI address of rdma2"
	dev=$(rail_rdma_dev rdma2)
	new_pod envdi
	roce_conf /tmp/envdi.conf envdi rdma2 1.0.0 10.10.70.0/24 \
		"$(jq -n --arg pci "$pci" --arg f "$file" '{deviceID: $pci, runtimeConfig: {CNIDeviceInfoFile: $f}}')"
	assert_ok cni_exec ADD /tmp/envdi.conf /run/netns/envdi
	[[ -f $file ]] || fail "no device-info file at $file after ADD"
	doc=$(cat "$file")
	assert_eq "$(jq -r .type <<<"$doc")" pci "device-info type"
	assert_eq "$(jq -r .version <<<"$doc")" 1.1.0 "device-info version"
	assert_eq "$(jq -r '.pci."pci-address"' <<<"$doc")" "$pci" "device-info pci-address"
	assert_eq "$(jq -r '.pci."rdma-device"' <<<"$doc")" "$dev" "device-info rdma-device"
	note "device-info: $doc"
	assert_ok cni_exec DEL /tmp/envdi.conf /run/netns/envdi
	[[ ! -e $file ]] || fail "device-info file still there after DEL"
	assert_ok cni_exec DEL /tmp/envdi.conf /run/netns/envdi

	# Without the capability nothing is written.
	roce_conf /tmp/envdi2.conf envdi2 rdma2 1.0.0 10.10.71.0/24 "$(jq -n --arg pci "$pci" '{deviceID: $pci}')"
	assert_ok cni_exec ADD /tmp/envdi2.conf /run/netns/envdi
	assert_eq "$(ls /var/run/k8s.cni.cncf.io/devinfo/cni/ 2>/dev/null)" "" "no device-info without the capability"
	assert_ok cni_exec DEL /tmp/envdi2.conf /run/netns/envdi
}

# IPv6 SLAAC rails, one with a placeholder (whose GID sits below the SLAAC one): env names
# exactly the SLAAC GIDs the plugin reported, as the pod's sysfs shows them.
test_env_ipv6_slaac_rails() {
	require_plugin
	# The rail routers and the SLAAC configs of the IPv6 suite.
	# shellcheck source=15-ipv6.sh
	source "$(dirname "${BASH_SOURCE[0]}")/15-ipv6.sh"
	local json i ifn dev port idx gid prefix first same=1
	# The host's rails would autoconfigure from the same RAs; on this upstream kernel their
	# GIDs are visible in the pod and sit inside any NCCL range that covers the pod's (env then
	# refuses, rightly). DOCA-OFED hides them; here the host rails take no RA for this test.
	local r
	for r in rdma2 rdma3; do
		sysctl -qw "net.ipv6.conf.$r.accept_ra=0"
		ip -6 addr flush dev "$r" scope global
	done
	start_router 2 2001:db8:13::/64
	start_router 3 2001:db8:14::/64
	new_v6off_pod envv6
	slaac_conf /tmp/envv6-0.conf envv6-0 rdma2
	slaac_conf /tmp/envv6-1.conf envv6-1 rdma3 '{"ipam": {"type": "host-local", "subnet": "fd01:0:0:103::/112"}}'
	assert_ok cni_exec ADD /tmp/envv6-0.conf /run/netns/envv6 net1 envv6
	assert_ok cni_exec ADD /tmp/envv6-1.conf /run/netns/envv6 net2 envv6
	assert_ok in_pod envv6 "$(env_bin)" env --format json
	json=$OUT
	assert_eq "$(jq '.rails | length' <<<"$json")" 2 "number of rails"
	for i in 0 1; do
		ifn=net$((i + 1)) prefix=2001:db8:$((13 + i))::/64
		dev=$(jq -r ".rails[$i].rdmaDevice" <<<"$json")
		port=$(jq -r ".rails[$i].port" <<<"$json")
		idx=$(jq -r ".rails[$i].gidIndex" <<<"$json")
		gid=$(jq -r ".rails[$i].gid" <<<"$json")
		in_prefix "$gid" "$prefix" || fail "$ifn: env's GID $gid is not the SLAAC address in $prefix"
		assert_eq "$idx" "$(alias_field envv6 "$ifn" gid_index)" "$ifn gidIndex as in the ifalias"
		assert_eq "$(in_pod envv6 cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx")" "$(gid_long "$gid")" \
			"$ifn GID at $dev/$port/$idx (pod view)"
		note "$ifn: $gid at $dev/$port index $idx"
		first=${first:-$idx}
		[[ $idx == "$first" ]] || same=0
	done
	if ((same)); then
		assert_eq "$(jq -r .env.NCCL_IB_GID_INDEX <<<"$json")" "$first" "NCCL_IB_GID_INDEX"
	else
		assert_eq "$(jq -r .env.NCCL_IB_ADDR_FAMILY <<<"$json")" AF_INET6 "NCCL_IB_ADDR_FAMILY with differing indexes"
	fi
	assert_ok cni_exec DEL /tmp/envv6-1.conf /run/netns/envv6 net2 envv6
	assert_ok cni_exec DEL /tmp/envv6-0.conf /run/netns/envv6 net1 envv6
	for r in rdma2 rdma3; do sysctl -qw "net.ipv6.conf.$r.accept_ra=1"; done
}

# `env --exec` in a pod: the command runs with exactly the settings `env` prints, conflicting
# variables of the container are replaced with a warning (default) or refused, and the command
# is not started when the rails are not ready (no rails, a GID gone).
test_env_exec_in_pod() {
	require_plugin
	local json k v got marker=/tmp/envexec-ran
	rm -f "$marker"
	pod_rails envexec envx 10.10.8 rdma0 rdma1
	assert_ok in_pod envexec "$(env_bin)" env --format json
	json=$OUT
	check_env_json envexec "$json" 2 >/dev/null

	# A container environment with a stale global GID index, an HCA list for another node and
	# a subnet list UCX would refuse next to UCX_IB_GID_INDEX.
	assert_ok in_pod envexec env NCCL_IB_GID_INDEX=7 NCCL_IB_HCA=mlx5_0 UCX_IB_ROCE_SUBNETS=10.0.0.0/8 \
		"$(env_bin)" env --exec -- printenv
	got=$OUT
	while IFS= read -r k; do
		v=$(jq -r --arg k "$k" '.env[$k]' <<<"$json")
		assert_eq "$(grep -E "^$k=" <<<"$got")" "$k=$v" "$k in the command's environment"
	done < <(jq -r '.env | keys[]' <<<"$json")
	for k in $(jq -r '.unset[]' <<<"$json"); do
		! grep -qE "^$k=" <<<"$got" || fail "$k still in the command's environment: $(grep -E "^$k=" <<<"$got")"
	done
	# Each of the three differs from what env wants (set to another value, or set where env
	# needs it unset), whichever way the pod's GID indexes fall.
	for k in NCCL_IB_GID_INDEX NCCL_IB_HCA UCX_IB_ROCE_SUBNETS; do
		assert_match "$ERR" "warning: replacing $k=" "warning for $k"
	done
	assert_eq "$(grep -c 'warning: replacing' <<<"$ERR")" 3 "number of warnings"
	note "stderr: $(tr '\n' ' ' <<<"$ERR")"

	# The command's arguments are passed as they are, no shell in between.
	# shellcheck disable=SC2016
	assert_ok in_pod envexec "$(env_bin)" env --exec printf '%s|' 'a b' '$HOME'
	# shellcheck disable=SC2016
	assert_eq "$OUT" 'a b|$HOME|' "arguments reach the command unchanged"

	# refuse: the command does not start.
	run_cmd in_pod envexec env NCCL_IB_HCA=mlx5_0 "$(env_bin)" env --on-conflict refuse --exec -- touch "$marker"
	assert_eq "$RC" 1 "exit status of a refused conflict"
	assert_match "$ERR" 'not starting "touch": the environment already sets NCCL_IB_HCA="mlx5_0"' "refusal message"
	[[ ! -e $marker ]] || fail "the command ran although the conflict was refused"

	# A rail whose GID is gone: no command, a message naming the rail.
	in_pod envexec ip addr flush dev net2
	run_cmd in_pod envexec "$(env_bin)" env --exec -- touch "$marker"
	assert_eq "$RC" 1 "exit status with net2's GID gone"
	assert_match "$ERR" "rail net2 \(rxe[0-9]+ port 1\)" "the message names the rail"
	[[ ! -e $marker ]] || fail "the command ran with a stale GID"

	# A pod without roce-ipvlan attachments: no command.
	new_pod envexecnone
	run_cmd in_pod envexecnone "$(env_bin)" env --exec -- touch "$marker"
	assert_eq "$RC" 1 "exit status without rails"
	assert_match "$ERR" "no roce-ipvlan rails" "message without rails"
	[[ ! -e $marker ]] || fail "the command ran without rails"
}
