# shellcheck shell=bash
# A pod attached to 4 rails through one NAD, as users write it (cni-args pick the rail): Ready,
# network-status from Multus, each child's GID inside the pod at the index its ifalias names,
# `roce-ipvlan env` in the pod.

test_pod_on_four_rails() {
	local status ip i
	rail_nad rails
	testpod four "$(networks_on_rails rails rdma0 rdma1 rdma2 rdma3)"
	wait_pod_ready four 300 || { kubectl describe pod four | tail -n 15; fail "pod 'four' is not Ready"; }
	status=$(netstatus four)
	note "network-status: $(jq -c '[.[] | {name, interface, ips, "device-info"}]' <<<"$status")"
	assert_eq "$(jq '[.[] | select(.name == "default/rails")] | length' <<<"$status")" 4 "rails entries in network-status"
	for i in 1 2 3 4; do
		ip=$(verify_pod_rail four "net$i" "rdma$((i - 1))")
		assert_match "$ip" "^${RAIL_NET//./\\.}\\." "net$i's address from the NAD's range"
		assert_eq "$(jq -r --arg i "net$i" '.[] | select(.interface == $i) | .mac' <<<"$status")" \
			"$(in_pod four cat "/sys/class/net/net$i/address")" "network-status MAC of net$i"
	done
	# No device-info here: Multus hands a plugin a device-info path only with a deviceID (a NAD
	# with a resourceName); rails picked by cni-args have none.
	# `roce-ipvlan env` in the pod: the values its children's ifaliases call for, not just names.
	local env alias kv dev port idx hcas=() idxs=() ips=() got want
	for i in 1 2 3 4; do
		alias=$(in_pod four cat "/sys/class/net/net$i/ifalias")
		dev="" port="" idx=""
		for kv in $alias; do
			case $kv in rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; esac
		done
		hcas+=("$dev:$port") idxs+=("$idx")
		ips+=("$(jq -r --arg i "net$i" '.[] | select(.interface == $i) | .ips[0]' <<<"$status")/32")
	done
	# Through kubectl exec, as a user runs it (in_pod enters a pod on this node directly).
	env=$(kubectl exec four -- roce-ipvlan env) || fail "roce-ipvlan env failed in the pod (kubectl exec)"
	note "env: $(tr '\n' ' ' <<<"$env")"
	# What the settings are, read the way a job's shell reads them.
	got=$(bash -c "$env"'
		for v in NCCL_IB_HCA UCX_NET_DEVICES NCCL_IB_GID_INDEX UCX_IB_GID_INDEX NCCL_IB_ADDR_FAMILY UCX_IB_ROCE_SUBNETS; do
			echo "$v=${!v:-}"
		done') || fail "env's output is not valid shell: $env"
	local -A vals=()
	while IFS='=' read -r kv rest; do vals[$kv]=$rest; done <<<"$got"
	local hca=${vals[NCCL_IB_HCA]} ucxdev=${vals[UCX_NET_DEVICES]} nidx=${vals[NCCL_IB_GID_INDEX]}
	local uidx=${vals[UCX_IB_GID_INDEX]} fam=${vals[NCCL_IB_ADDR_FAMILY]} subnets=${vals[UCX_IB_ROCE_SUBNETS]}
	local sorted_hcas sorted_ips
	sorted_hcas=$(printf '%s\n' "${hcas[@]}" | sort | paste -sd,)
	sorted_ips=$(printf '%s\n' "${ips[@]}" | sort | paste -sd,)
	[[ $hca == =* ]] || fail "NCCL_IB_HCA '$hca' lacks the leading '=' (exact device names)"
	assert_eq "$(tr , '\n' <<<"${hca#=}" | sort | paste -sd,)" "$sorted_hcas" "NCCL_IB_HCA's devices (the children's ifaliases)"
	assert_eq "$(tr , '\n' <<<"$ucxdev" | sort | paste -sd,)" "$sorted_hcas" "UCX_NET_DEVICES (the children's ifaliases)"
	if [[ $(printf '%s\n' "${idxs[@]}" | sort -u | wc -l) == 1 ]]; then
		want=${idxs[0]}
		assert_eq "$nidx $uidx" "$want $want" "NCCL_IB_GID_INDEX and UCX_IB_GID_INDEX (every child's ifalias says $want)"
		assert_eq "$fam$subnets" "" "NCCL_IB_ADDR_FAMILY and UCX_IB_ROCE_SUBNETS with one index for all rails"
	else
		note "GID indexes differ between rails: ${idxs[*]}"
		assert_eq "$nidx$uidx" "" "GID index variables when the rails' indexes differ (${idxs[*]})"
		assert_eq "$fam" AF_INET "NCCL_IB_ADDR_FAMILY"
		assert_eq "$(tr , '\n' <<<"$subnets" | sort | paste -sd,)" "$sorted_ips" "UCX_IB_ROCE_SUBNETS (the pod's addresses)"
	fi
}
