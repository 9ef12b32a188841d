# shellcheck shell=bash
# Rails chosen by the device plugin (examples/a100-one-nad-deviceid.yaml): the NAD's resourceName
# makes Multus take one allocated nvidia.com/hostdev device per reference, read its PCI address
# from kubelet's pod-resources and pass it as deviceID. The devices come from the SR-IOV network
# device plugin (the Network Operator's build, tests/k8s/manifests/sriovdp), offering the rails by
# PCI address with examples/nicclusterpolicy.yaml's selectors less the two the virtio rails cannot
# meet (tests/k8s/lib.sh, install_sriovdp). Its IPAM is the example's, nv-ipam with
# examples/a100-ippool.yaml.

test_deviceid_pod_gets_a_child_on_each_allocated_rail() {
	local status ifn rail pci alloc seen=() block
	block=$(example_pool)
	example_nad examples/a100-one-nad-deviceid.yaml rdma-rails
	assert_eq "$(kubectl get node "$K8S_NODE" -o jsonpath='{.status.allocatable.nvidia\.com/hostdev}')" 4 \
		"nvidia.com/hostdev devices the node offers (sriovdp: rdma0..rdma3)"
	TESTPOD_DEVICES='nvidia.com/hostdev: 2' testpod two-devices 'rdma-rails, rdma-rails'
	wait_pod_ready two-devices 300 || { kubectl describe pod two-devices | tail -n 15; fail "pod two-devices is not Ready"; }
	# What kubelet allocated, as the device plugin's Allocate told the container.
	alloc=$(in_pod two-devices printenv PCIDEVICE_NVIDIA_COM_HOSTDEV)
	note "allocated: $alloc"
	status=$(netstatus two-devices)
	note "network-status: $(jq -c '[.[] | {name, interface, ips, "device-info"}]' <<<"$status")"
	for ifn in net1 net2; do
		pci=$(jq -r --arg i "$ifn" '.[] | select(.interface == $i) | ."device-info".pci."pci-address"' <<<"$status")
		[[ ,$alloc, == *",$pci,"* ]] || fail "device-info of $ifn names $pci, not one of the allocated devices ($alloc)"
		# The child sits on the rail whose PCI function is that device.
		rail=$(rail_of_pci "$pci")
		verify_pod_rail two-devices "$ifn" "$rail" >/dev/null
		assert_eq "$(jq -r --arg i "$ifn" '.[] | select(.interface == $i) | ."device-info".pci."rdma-device"' <<<"$status")" \
			"$(rail_rdma_dev "$rail")" "device-info rdma-device of $ifn"
		seen+=("$pci")
	done
	[[ ${seen[0]} != "${seen[1]}" ]] || fail "both children on one device (${seen[0]})"
	nv_ipam_pod two-devices "$block" 2
	[[ $(devinfo_count) -ge 2 ]] || fail "expected the plugin's 2 device-info files on the node, found $(devinfo_count)"
	kubectl delete pod two-devices --wait=true --timeout=120s >/dev/null
	settles_to 60 "device-info files, children and nv-ipam's reservations after the pod's deletion" "0 0 0" \
		counts devinfo_count children_count "nv_ipam_count two-devices"
}
