# shellcheck shell=bash
# The B300 layout under Kubernetes: IPv6-only rails, each routed, with the node's own /64 per
# rail announced by that rail's router (rail_routers_start, suite/lib.sh). The examples
# b300-ipv6-slaac.yaml and b300-ipv6-slaac-placeholder.yaml are applied as users apply them: one
# NAD for all rails, the rails picked by the SR-IOV device plugin's nvidia.com/hostdev devices
# (deviceID). Each child takes its routable address by SLAAC; its ifalias and `roce-ipvlan env`
# name that address's GID, never the placeholder's (the -placeholder example's nv-ipam
# CIDRPool), and `roce-ipvlan env --exec` starts the job with UCX and NCCL steered to it.

in_prefix() { # ADDR PREFIX[,PREFIX...]: ADDR is in one of them
	python3 -c 'import ipaddress, sys; a = ipaddress.ip_address(sys.argv[1])
sys.exit(not any(a in ipaddress.ip_network(p, strict=False) for p in sys.argv[2].split(",") if p))' "$1" "$2"
}

# node_prefix POOL: the prefix of the node's allocation in the CIDRPool's status.
node_prefix() {
	kubectl -n "$NV_IPAM_NS" get cidrpool "$1" -o json |
		jq -er --arg n "$K8S_NODE" 'first(.status.allocations[]? | select(.nodeName == $n)) | .prefix'
}

# slaac_rail POD IFNAME [PLACEHOLDER_PREFIX]: IFNAME, as POD's network-status reports it, sits on
# the rail its device-info names, with one address in that rail's /64 (the SLAAC one) and, with
# PLACEHOLDER_PREFIX, one in that prefix, nothing else; both are on the child; its ifalias names
# the rail's RDMA device and a GID index that holds the SLAAC address's RoCE v2 GID as the pod
# reads it. Prints "RAIL SLAAC GID_INDEX PLACEHOLDER".
slaac_rail() {
	local pod=$1 ifn=$2 ph_prefix=${3:-} status pci rail prefix ip slaac="" ph="" addrs alias kv
	local dev="" port="" idx="" gid="" base
	status=$(netstatus "$pod" | jq -c --arg i "$ifn" '.[] | select(.interface == $i)')
	[[ -n $status ]] || fail "network-status of $pod has no entry for $ifn: $(netstatus "$pod")"
	pci=$(jq -r '."device-info".pci."pci-address" // empty' <<<"$status")
	[[ -n $pci ]] || fail "network-status of $pod/$ifn has no device-info PCI address: $status"
	rail=$(rail_of_pci "$pci")
	prefix=$(rail_prefix "${rail#rdma}")
	for ip in $(jq -r '.ips[]?' <<<"$status"); do
		if in_prefix "$ip" "$prefix"; then
			[[ -z $slaac ]] || fail "$pod/$ifn reports two addresses in $rail's $prefix: $slaac, $ip"
			slaac=$ip
		elif [[ -n $ph_prefix ]] && in_prefix "$ip" "$ph_prefix"; then
			[[ -z $ph ]] || fail "$pod/$ifn reports two placeholders: $ph, $ip"
			ph=$ip
		else
			fail "$pod/$ifn's address $ip is not in $rail's $prefix${ph_prefix:+ nor in the placeholder prefix $ph_prefix}"
		fi
	done
	[[ -n $slaac ]] || fail "$pod/$ifn reports no address in $rail's $prefix (SLAAC): $status"
	[[ -z $ph_prefix || -n $ph ]] || fail "$pod/$ifn reports no placeholder in $ph_prefix: $status"
	addrs=$(in_pod "$pod" ip -6 -o addr show dev "$ifn" scope global)
	grep -qF " $slaac/64 " <<<"$addrs" || fail "$pod/$ifn does not hold its SLAAC address $slaac/64: $addrs"
	[[ -z $ph ]] || grep -qF " $ph/" <<<"$addrs" || fail "$pod/$ifn does not hold its placeholder $ph: $addrs"
	alias=$(in_pod "$pod" cat "/sys/class/net/$ifn/ifalias")
	for kv in $alias; do
		case $kv in rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; gid=*) gid=${kv#*=} ;; esac
	done
	assert_eq "$dev" "$(rail_rdma_dev "$rail")" "$pod/$ifn's RDMA device (ifalias '$alias')"
	assert_eq "$(gid_of_ipv6 "$gid")" "$(gid_of_ipv6 "$slaac")" "the GID $pod/$ifn's ifalias names (its SLAAC address)"
	base=/sys/class/infiniband/$dev/ports/$port
	assert_eq "$(in_pod "$pod" cat "$base/gids/$idx" "$base/gid_attrs/types/$idx" "$base/gid_attrs/ndevs/$idx" | paste -sd' ')" \
		"$(gid_of_ipv6 "$slaac") RoCE v2 $ifn" "GID $dev/$port/$idx, its type and netdev, read in $pod"
	echo "$rail $slaac $idx $ph"
}

# env_steers POD RAILS: `roce-ipvlan env` in POD names each rail's reported GID, and the
# environment `roce-ipvlan env --exec` gives a command selects those GIDs and no placeholder's.
# RAILS: lines "IFNAME GID_INDEX SLAAC [PLACEHOLDER]".
env_steers() {
	local pod=$1 rails=$2 json got ifn idx slaac ph key val line
	json=$(in_pod "$pod" roce-ipvlan env --format json) || fail "roce-ipvlan env failed in $pod"
	while read -r ifn idx slaac ph; do
		assert_eq "$(jq -r --arg i "$ifn" '.rails[] | select(.interface == $i) | "\(.gidIndex) \(.gid)"' <<<"$json" |
			{ read -r i g && echo "$i $(gid_of_ipv6 "$g")"; })" "$idx $(gid_of_ipv6 "$slaac")" "env's GID index and GID of $ifn"
	done <<<"$rails"
	# The environment the job gets, as `env --exec` starts it.
	got=$(in_pod "$pod" roce-ipvlan env --exec -- env) || fail "roce-ipvlan env --exec -- env failed in $pod"
	local -A vars=()
	while IFS= read -r line; do
		key=${line%%=*} val=${line#*=}
		[[ $key == NCCL_* || $key == UCX_* ]] && vars[$key]=$val
	done <<<"$got"
	note "env --exec: $(for key in "${!vars[@]}"; do printf '%s=%s ' "$key" "${vars[$key]}"; done)"
	[[ -n ${vars[UCX_NET_DEVICES]:-} ]] || fail "env --exec set no UCX_NET_DEVICES: $got"
	if [[ -n ${vars[UCX_IB_GID_INDEX]:-} ]]; then
		while read -r ifn idx slaac ph; do
			assert_eq "${vars[UCX_IB_GID_INDEX]} ${vars[NCCL_IB_GID_INDEX]:-}" "$idx $idx" \
				"UCX_IB_GID_INDEX and NCCL_IB_GID_INDEX (the index $ifn reported)"
		done <<<"$rails"
		[[ -z ${vars[UCX_IB_ROCE_SUBNETS]:-} ]] || fail "UCX_IB_ROCE_SUBNETS set beside UCX_IB_GID_INDEX"
	else
		# Different indexes per rail: UCX picks by subnet, NCCL by family (and range).
		assert_eq "${vars[NCCL_IB_ADDR_FAMILY]:-}" AF_INET6 "NCCL_IB_ADDR_FAMILY with per-rail GID indexes"
		while read -r ifn idx slaac ph; do
			in_prefix "$slaac" "${vars[UCX_IB_ROCE_SUBNETS]:-}" ||
				fail "UCX_IB_ROCE_SUBNETS '${vars[UCX_IB_ROCE_SUBNETS]:-}' leaves out $ifn's SLAAC address $slaac"
			[[ -z $ph ]] || ! in_prefix "$ph" "${vars[UCX_IB_ROCE_SUBNETS]}" ||
				fail "UCX_IB_ROCE_SUBNETS '${vars[UCX_IB_ROCE_SUBNETS]}' covers $ifn's placeholder $ph: UCX could pick its GID"
			[[ -z ${vars[NCCL_IB_ADDR_RANGE]:-} ]] || in_prefix "$slaac" "${vars[NCCL_IB_ADDR_RANGE]}" ||
				fail "NCCL_IB_ADDR_RANGE '${vars[NCCL_IB_ADDR_RANGE]}' leaves out $ifn's SLAAC address $slaac"
			[[ -z $ph || -z ${vars[NCCL_IB_ADDR_RANGE]:-} ]] || ! in_prefix "$ph" "${vars[NCCL_IB_ADDR_RANGE]}" ||
				fail "NCCL_IB_ADDR_RANGE '${vars[NCCL_IB_ADDR_RANGE]}' covers $ifn's placeholder $ph"
		done <<<"$rails"
	fi
}

# nonzero_gids POD: the non-zero RoCE GIDs the pod can read, one "FILE:GID" a line, link-local
# ones left out.
nonzero_gids() {
	# One grep reads every GID file (a process per file takes minutes under TCG); empty slots
	# fail to read and are skipped, so grep's status says nothing. What must hold: the read
	# worked and the pod sees the RDMA devices' GID tables at all (the report's pods do: the
	# devices are there, their GIDs read as zero), else "reads no GIDs" would prove nothing.
	local out tables
	# shellcheck disable=SC2016 # expanded in the pod
	out=$(in_pod "$1" sh -c 'set -- /sys/class/infiniband/*/ports/*/gids/0; [ -e "$1" ] && echo "tables=$#" || echo tables=0
		grep -H . /sys/class/infiniband/*/ports/*/gids/* 2>/dev/null; true') ||
		fail "reading the GID tables in pod $1 failed"
	tables=$(sed -n '1s/^tables=//p' <<<"$out")
	((${tables:-0} > 0)) || fail "pod $1 sees no RDMA device's GID table (first line: '$(head -n 1 <<<"$out")')"
	tail -n +2 <<<"$out" | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$' | grep -v ':fe80:' || true
}

# The OFED view hides every GID outside the pod's namespace (the node's own rail addresses
# included): the pod reads exactly WANT_GIDS (one a line), link-local ones aside.
pod_reads_only() { # POD WANT_GIDS
	local seen
	seen=$(nonzero_gids "$1" | sed 's/.*:\([0-9a-f]\{4\}\(:[0-9a-f]\{4\}\)\{7\}\)$/\1/' | sort)
	note "$1 reads: $(tr '\n' ' ' <<<"$seen")"
	assert_eq "$seen" "$(sort <<<"$2")" "the non-zero RoCE GIDs $1 reads"
}

# Both examples at once, a pod on each, each pod asking for 2 devices: the node's 4 rails are
# all used. Pod v6 (b300-ipv6-slaac.yaml: no IPAM) holds only its SLAAC addresses. Pod ph
# (b300-ipv6-slaac-placeholder.yaml) holds a placeholder from the node's block of the CIDRPool
# on each child too, and reads the placeholder's GID beside the SLAAC one (the report's trap: UCX
# left alone picks it); the plugin still reports the SLAAC one, and the placeholders go back to
# the pool on deletion. On the OFED view the field report's symptom and fix side by side: pod
# bare has the RDMA devices and no attachment and reads no RoCE GID at all (not even the
# others', on the same devices), while v6 and ph read exactly their own.
test_b300_pods_report_their_slaac_gids() {
	local pod ifn info rail addr idx ph prefix
	local -A rails=() gids=()
	local phs=""
	rail_routers_start
	example_nad examples/b300-ipv6-slaac.yaml rdma-rails-v6
	kubectl apply -f "$ROCE_REPO/examples/b300-ipv6-slaac-placeholder.yaml" >/dev/null
	wait_for 180 "the node's prefix of rdma-v6-placeholder" node_prefix rdma-v6-placeholder ||
		fail "no prefix of rdma-v6-placeholder for $K8S_NODE: $(kubectl -n "$NV_IPAM_NS" get cidrpool rdma-v6-placeholder -o jsonpath='{.status}')"
	prefix=$(node_prefix rdma-v6-placeholder)
	TESTPOD_DEVICES='nvidia.com/hostdev: 2' testpod v6 'rdma-rails-v6, rdma-rails-v6'
	TESTPOD_DEVICES='nvidia.com/hostdev: 2' testpod ph 'rdma-rails-v6-placeholder, rdma-rails-v6-placeholder'
	testpod bare '[]'
	for pod in v6 ph bare; do
		wait_pod_ready "$pod" 300 || { pod_debug "$pod"; fail "pod $pod is not Ready"; }
	done
	for pod in v6 ph; do
		for ifn in net1 net2; do
			if [[ $pod == ph ]]; then info=$(slaac_rail "$pod" "$ifn" "$prefix"); else info=$(slaac_rail "$pod" "$ifn"); fi
			read -r rail addr idx ph <<<"$info"
			note "$pod/$ifn on $rail: SLAAC $addr, GID index $idx${ph:+; placeholder $ph}"
			rails[$pod]+="$ifn $idx $addr $ph"$'\n'
			gids[$pod]+="$(gid_of_ipv6 "$addr")"$'\n'
			[[ -z $ph ]] || { gids[$pod]+="$(gid_of_ipv6 "$ph")"$'\n' phs+="$ph"$'\n'; }
		done
	done
	assert_eq "$(nv_ipam_reserved ph | paste -sd' ')" "$(sort <<<"$phs" | grep . | paste -sd' ')" \
		"what ipam-node holds for pod ph ($NV_IPAM_STORE): its two placeholders"
	for pod in v6 ph; do
		# On the OFED view the pod reads its own GIDs only, the node's rail addresses not.
		[[ ${VM_RDMA:-upstream} != ofed ]] || pod_reads_only "$pod" "$(grep . <<<"${gids[$pod]}")"
		env_steers "$pod" "$(grep . <<<"${rails[$pod]}")"
	done
	[[ ${VM_RDMA:-upstream} != ofed ]] || pod_reads_only bare ""
	kubectl delete pod v6 ph bare --wait=true --timeout=120s >/dev/null
	settles_to 60 "children, device-info files and nv-ipam's reservations after the pods' deletion" "0 0 0" \
		counts children_count devinfo_count "nv_ipam_count ph"
}
